//! `mpric`: train recipe files with mixed precision (`mpric train recipes/quickstart.toml`).

fn main() -> std::process::ExitCode {
    burn_mpric_train::cli::main()
}
