//! A backend that cannot start here panics; the bench reports why and goes on.

use std::sync::Arc;

/// Runs `f`, turning a panic (a backend without a device) into its message. A backend that
/// starts its device in a worker thread panics there first and the caller sees only a closed
/// channel: the first panic of any thread is the message then.
pub(crate) fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let first = Arc::new(std::sync::Mutex::new(None::<String>));
    let hook = std::panic::take_hook();
    {
        let first = Arc::clone(&first);
        std::panic::set_hook(Box::new(move |info| {
            if let Ok(mut first) = first.lock() {
                first.get_or_insert_with(|| panic_text(info.payload()));
            }
        }));
    }
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    result.map_err(|payload| {
        let first = first.lock().ok().and_then(|mut first| first.take());
        first.unwrap_or_else(|| panic_text(payload.as_ref()))
    })
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "the backend panicked while creating a tensor".into())
}
