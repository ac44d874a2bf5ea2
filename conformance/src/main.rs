//! `conformance`: checks a SecureChat relay against SPEC.md and PROTOCOL.md, case by case
//! (the command line is [`conformance::cli`]).

fn main() -> std::process::ExitCode {
    conformance::cli::main(&[])
}
