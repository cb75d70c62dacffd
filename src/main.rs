use std::process::ExitCode;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = llmspeed::cli::parse_env();
    match llmspeed::cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("llmspeed: {e}");
            ExitCode::from(e.code)
        }
    }
}
