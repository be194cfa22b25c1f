//! The one macro behind every forwarded op: find the call's precision settings, cast the
//! float inputs by the op table, unwrap, call the inner backend, wrap the result.

/// Implements the listed ops by forwarding to the inner backend `B`.
///
/// `=> category Op;` casts the float inputs as the op table says for `Op`;
/// `=> plain;` forwards without casting (view, index, int and bool ops);
/// `=> bounded [Op];` is the function of the same name in `ops/softmax.rs`, which follows the
/// softmax's pieces (the op table's rule, plus what it knows of their range).
macro_rules! forward_ops {
    ($( fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) -> $ret:ty => $kind:ident $($op:ident)? ; )*) => {$(
        fn $name($($arg: $ty),*) -> $ret {
            $crate::ops::forward::forward_ops!(@body $kind $($op)? ; $name ; $ret ; $($arg),*)
        }
    )*};
    (@body bounded $($op:ident)? ; $name:ident ; $ret:ty ; $($arg:ident),*) => {
        $crate::ops::softmax::$name::<B>($($arg),*)
    };
    (@body $kind:ident $($op:ident)? ; $name:ident ; $ret:ty ; $($arg:ident),*) => {{
        let precision: $crate::rules::Precision = None
            $(.into_iter().chain($crate::ops::args::Arg::<B>::precision(&$arg)))*
            .reduce($crate::rules::Precision::preferred)
            .cloned()
            .expect("every decorated op has a tensor or device argument");
        $crate::ops::forward::forward_ops!(@cast $kind $($op)? ; precision ; $($arg),*);
        <$ret as $crate::ops::args::Output<B>>::wrap(
            B::$name($($crate::ops::args::Arg::<B>::into_inner($arg)),*),
            &precision,
        )
    }};
    (@cast plain ; $precision:ident ; $($arg:ident),*) => {};
    (@cast category $op:ident ; $precision:ident ; $($arg:ident),*) => {
        let mut inputs = $crate::rules::InputDTypes::default();
        $( $crate::ops::args::Arg::<B>::collect(&$arg, &mut inputs); )*
        let target = $precision.0.target($crate::Op::$op, &inputs);
        $( let $arg = $crate::ops::args::Arg::<B>::cast(
            $arg,
            target,
            $crate::ops::args::caches_cast(stringify!($arg)),
        ); )*
    };
}

pub(crate) use forward_ops;
