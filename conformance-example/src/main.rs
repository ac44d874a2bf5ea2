//! `team-conformance`: the built-in suite and the team's cases, one runner, one report.

fn main() -> std::process::ExitCode {
    conformance::cli::main(&[conformance_example::CASES])
}
