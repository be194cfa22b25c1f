//! The policy grammar against eformer's (`Policy.from_string`) and jmp's (`get_policy`)
//! behaviour, and the `Display` round trip.

use burn::backend::{Flex, NdArray};
use burn::config::Config;
use burn_mpric::FloatDType::{self, BF16, F16, F32, F64};
use burn_mpric::{BurnDType, Policy, PolicyDType, PolicyError, ResolveOnDevice, ResolvedPolicy};
use proptest::prelude::*;

fn parse(text: &str) -> Result<Policy, PolicyError> {
    text.parse()
}

/// The triple of a policy with no `half` in it.
fn triple(text: &str) -> (FloatDType, FloatDType, FloatDType) {
    parse(text)
        .unwrap_or_else(|e| panic!("`{text}` should parse: {e}"))
        .try_into()
        .map(|resolved: ResolvedPolicy| resolved.dtypes())
        .unwrap_or_else(|e| panic!("`{text}` should be resolved: {e}"))
}

#[test]
fn eformer_rows_that_eformer_parses_give_eformers_triple() {
    for (text, dtype) in [
        ("f32", F32),
        ("F32", F32),
        (" bf16 ", BF16),
        ("float16", F16),
        ("f64", F64),
    ] {
        assert_eq!(triple(text), (dtype, dtype, dtype), "{text}");
    }
    let rows = [
        ("c=f16", (F32, F16, F16)),
        ("p=f16", (F16, F16, F16)),
        ("p=bf16,c=f32", (BF16, F32, F32)),
        ("o=bf16", (F32, F32, BF16)),
        ("c=bf16,o=f32", (F32, BF16, F32)),
        ("params=f32,compute=bf16,output=f32", (F32, BF16, F32)),
        ("p=F16", (F16, F16, F16)),
        ("p=f32,c=f16,o=bf16", (F32, F16, BF16)),
    ];
    for (text, expected) in rows {
        assert_eq!(triple(text), expected, "{text}");
    }
}

#[test]
fn half_stays_symbolic_until_resolved_and_then_matches_eformer_on_an_f16_platform() {
    let all_half = parse("half").unwrap();
    assert_eq!(all_half.compute(), PolicyDType::Half);
    assert!(!all_half.is_resolved());
    assert_eq!(all_half.resolve_half(F16).dtypes(), (F16, F16, F16));

    let c_half = parse("c=half").unwrap();
    assert_eq!(c_half.resolve_half(F16).dtypes(), (F32, F16, F16));
    // Flex runs bf16, so `half` means bf16 there.
    let on_flex = c_half.resolve::<Flex>(&Default::default()).unwrap();
    assert_eq!(on_flex.dtypes(), (F32, BF16, BF16));
}

#[test]
fn rows_eformer_silently_ignores_parse_correctly_or_error() {
    // eformer: (f32, f32, f32) because the keys "p " and "c " are silently dropped.
    assert_eq!(triple("p = f32, c = bf16"), (F32, BF16, BF16));
    // eformer: (f32, f32, f32) because keys are case-sensitive there.
    assert_eq!(triple("P=f32,C=bf16"), (F32, BF16, BF16));
    for (text, bad_key) in [("x=f32", "x"), ("=f32", ""), ("p=f32,q=bf16", "q")] {
        match parse(text) {
            Err(PolicyError::UnknownKey { key, .. }) => assert_eq!(key, bad_key, "{text}"),
            other => panic!("`{text}` should be an unknown-key error, got {other:?}"),
        }
    }
}

#[test]
fn names_eformer_rejects_are_accepted_as_the_documented_superset() {
    assert_eq!(triple("fp16"), (F16, F16, F16));
    assert_eq!(triple("fp32"), (F32, F32, F32));
    assert_eq!(triple("full"), (F32, F32, F32));
    assert_eq!(triple("double"), (F64, F64, F64));
    assert_eq!(triple("p=single,c=half-precision"), (F32, F16, F16));
}

#[test]
fn presets() {
    assert_eq!(triple("mixed_f16"), (F32, F16, F32));
    assert_eq!(triple("mixed_float16"), (F32, F16, F32));
    assert_eq!(triple("MIXED_BF16"), (F32, BF16, F32));
    assert_eq!(triple("mixed_bfloat16"), (F32, BF16, F32));
    assert_eq!(triple("pure_f16"), (F16, F16, F16));
    assert_eq!(triple("pure_bf16"), (BF16, BF16, BF16));
    assert_eq!(
        parse("mixed_half").unwrap().resolve_half(F16).dtypes(),
        (F32, F16, F32)
    );
}

#[test]
fn malformed_input_gives_the_right_typed_error() {
    assert_eq!(parse(""), Err(PolicyError::Empty));
    assert_eq!(parse("   "), Err(PolicyError::Empty));
    assert!(matches!(
        parse("p=f32,c=bf16,"),
        Err(PolicyError::EmptyPart { index: 3, .. })
    ));
    assert!(matches!(
        parse("p=f32,,c=bf16"),
        Err(PolicyError::EmptyPart { index: 2, .. })
    ));
    for text in ["p=f32=x", "p=f32;c=bf16", "p=f32,bf16"] {
        assert!(
            matches!(parse(text), Err(PolicyError::MalformedPart { .. })),
            "{text}: {:?}",
            parse(text)
        );
    }
    for (text, name) in [
        ("p=unknown", "unknown"),
        ("p=", ""),
        ("p=f16,c=invalid,o=f32", "invalid"),
        ("compute_float16", "compute_float16"),
        ("invalid_policy", "invalid_policy"),
    ] {
        match parse(text) {
            Err(PolicyError::UnknownDType { name: got, .. }) => assert_eq!(got, name),
            other => panic!("`{text}` should be an unknown-dtype error, got {other:?}"),
        }
    }
    assert!(matches!(
        parse("p=f32,params=f16"),
        Err(PolicyError::DuplicateKey { slot: "param", .. })
    ));
    assert!(matches!(
        parse("c=f16,compute=f16"),
        Err(PolicyError::DuplicateKey {
            slot: "compute",
            ..
        })
    ));
}

#[test]
fn fp8_names_parse_but_are_refused() {
    for text in [
        "f8_e4m3",
        "fp8",
        "p=f32,c=float8_e5m2,o=f32",
        "c=FP8_E4M3FN",
    ] {
        match parse(text) {
            Err(e @ PolicyError::Fp8Unsupported { .. }) => {
                assert!(e.to_string().contains("fp8"), "{e}")
            }
            other => panic!("`{text}` should be refused as fp8, got {other:?}"),
        }
    }
}

#[test]
fn error_messages_name_the_fragment_and_what_is_accepted() {
    let msg = parse("p=f32,compute=bf61").unwrap_err().to_string();
    assert!(
        msg.contains("bf61") && msg.contains("bf16|bfloat16"),
        "{msg}"
    );
    let msg = parse("p=f32,kompute=bf16").unwrap_err().to_string();
    assert!(
        msg.contains("kompute") && msg.contains("c|compute"),
        "{msg}"
    );
    let msg = parse("compute_float16").unwrap_err().to_string();
    assert!(
        msg.to_lowercase().contains("unknown dtype") && msg.contains("mixed_bf16"),
        "{msg}"
    );
    let msg = parse("p=f32=x").unwrap_err().to_string();
    assert!(msg.contains("p=f32=x"), "{msg}");
}

#[test]
fn jmp_strings_give_jmps_triples() {
    assert_eq!(triple("c=f16"), (F32, F16, F16));
    assert_eq!(triple("c=bf16,o=full"), (F32, BF16, F32));
    assert_eq!(
        triple("params=float32,compute=float16,output=float32"),
        (F32, F16, F32)
    );
    // jmp prints `p=full,c=bf16,o=full`; the canonical form here uses `f32`, which parses back.
    assert_eq!(
        parse("c=bf16,o=full").unwrap().to_string(),
        "p=f32,c=bf16,o=f32"
    );
    assert_eq!(
        parse("c=half").unwrap().resolve_half(F16).dtypes(),
        (F32, F16, F16)
    );
}

#[test]
fn display_round_trips_every_combination() {
    let dtypes = [F16, BF16, F32, F64];
    for p in dtypes {
        for c in dtypes {
            for o in dtypes {
                let policy = Policy::new(p, c, o);
                let text = policy.to_string();
                assert_eq!(parse(&text), Ok(policy), "{text}");
                assert_eq!(
                    ResolvedPolicy::try_from(policy).map(|r| r.dtypes()),
                    Ok((p, c, o))
                );
            }
        }
    }
    let with_half = Policy::new(F32, PolicyDType::Half, F32);
    assert_eq!(parse(&with_half.to_string()), Ok(with_half));
}

#[test]
fn accessors_and_identity() {
    let p = parse("mixed_f16").unwrap();
    assert_eq!(p.param(), PolicyDType::Float(F32));
    assert_eq!(p.compute(), PolicyDType::Float(F16));
    assert_eq!(p.output(), PolicyDType::Float(F32));
    assert!(!p.is_identity());
    assert!(p.with_compute(F32).is_identity());
    assert_eq!(
        p.with_param(F16).with_output(F16),
        parse("pure_f16").unwrap()
    );
    assert_eq!(Policy::default(), Policy::F32);
}

#[test]
fn resolving_against_a_device_that_cannot_run_the_policy_is_an_error() {
    let err = parse("mixed_bf16")
        .unwrap()
        .resolve::<NdArray>(&Default::default())
        .unwrap_err();
    match &err {
        PolicyError::UnsupportedByDevice {
            slot,
            dtype,
            supported,
        } => {
            assert_eq!((*slot, *dtype), ("compute", BF16));
            assert!(supported.contains(&F32) && !supported.contains(&BF16));
        }
        other => panic!("expected an unsupported-dtype error, got {other:?}"),
    }
    assert!(err.to_string().contains("supports f64, f32"), "{err}");
    // `half` on a device without any 16-bit float is an error too, not a silent f32.
    assert!(
        parse("c=half")
            .unwrap()
            .resolve::<NdArray>(&Default::default())
            .is_err()
    );
    assert_eq!(
        Policy::F32.resolve::<NdArray>(&Default::default()),
        Ok(ResolvedPolicy::F32)
    );
}

#[test]
fn only_a_device_turns_half_into_a_dtype() {
    // Without a device, `half` is refused and the error names the slot.
    for (text, slot) in [
        ("p=half", "param"),
        ("c=half,o=f32", "compute"),
        ("o=half", "output"),
    ] {
        let err = ResolvedPolicy::try_from(parse(text).unwrap()).unwrap_err();
        assert_eq!(err, PolicyError::UnresolvedHalf { slot }, "{text}");
        assert!(err.to_string().contains("resolve"), "{err}");
        assert_eq!(text.parse::<ResolvedPolicy>(), Err(err));
    }
    // With one, the device decides: bf16 on Flex, which runs it.
    let on_flex = parse("c=half")
        .unwrap()
        .resolve::<Flex>(&Default::default());
    assert_eq!(
        on_flex.map(|r| r.compute().to_burn()),
        Ok(burn_mpric::half_dtype::<Flex>(&Default::default()))
    );
    // A resolved policy keeps its text form, and its serde form is that text.
    let resolved: ResolvedPolicy = "mixed_bf16".parse().unwrap();
    let json = serde_json::to_string(&resolved).unwrap();
    assert_eq!(json, "\"p=f32,c=bf16,o=f32\"");
    assert_eq!(
        serde_json::from_str::<ResolvedPolicy>(&json).unwrap(),
        resolved
    );
    assert!(serde_json::from_str::<ResolvedPolicy>("\"half\"").is_err());
}

#[test]
fn serde_uses_the_text_form_and_validates() {
    let p = parse("c=bf16,o=f32").unwrap();
    let json = serde_json::to_string(&p).unwrap();
    assert_eq!(json, "\"p=f32,c=bf16,o=f32\"");
    assert_eq!(serde_json::from_str::<Policy>(&json).unwrap(), p);
    let err = serde_json::from_str::<Policy>("\"p=f32,c=bf61\"").unwrap_err();
    assert!(err.to_string().contains("bf61"), "{err}");
}

#[derive(Config, Debug)]
struct RunConfig {
    policy: Policy,
    #[config(default = 3)]
    epochs: usize,
}

#[test]
fn policy_is_a_field_of_a_burn_config() {
    let dir = std::env::temp_dir().join(format!("mpric-policy-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("run.json");
    let config = RunConfig::new(parse("mixed_bf16").unwrap());
    config.save(&path).unwrap();
    let loaded = RunConfig::load(&path).unwrap();
    assert_eq!(loaded.policy, config.policy);
    assert_eq!(loaded.epochs, 3);
    std::fs::remove_dir_all(&dir).unwrap();
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        // Ok or a typed error; an Ok round-trips through Display.
        if let Ok(policy) = parse(&text) {
            prop_assert_eq!(parse(&policy.to_string()), Ok(policy));
        }
    }

    #[test]
    fn grammar_shaped_text_never_panics(
        text in r"[ pcoPCOx=,_a-z0-9]{0,40}"
    ) {
        if let Ok(policy) = parse(&text) {
            prop_assert_eq!(parse(&policy.to_string()), Ok(policy));
        }
    }
}
