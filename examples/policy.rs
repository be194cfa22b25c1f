//! Parse, resolve and print a mixed-precision policy.
//!
//! `cargo run -p burn-mpric-examples --example policy [POLICY]`

use burn::backend::Flex;
use burn_mpric::{Policy, ResolveOnDevice};

fn main() {
    let text = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "p=f32,c=half,o=f32".into());
    let policy: Policy = match text.parse() {
        Ok(policy) => policy,
        Err(err) => {
            eprintln!("error: {err}");
            std::process::exit(2);
        }
    };
    println!("parsed:           {policy}");
    match policy.resolve::<Flex>(&Default::default()) {
        Ok(resolved) => println!("resolved on Flex: {resolved}"),
        Err(err) => {
            eprintln!("error: {err}");
            std::process::exit(2);
        }
    }
}
