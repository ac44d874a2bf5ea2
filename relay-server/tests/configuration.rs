//! The `relay` binary configured as an operator does it: `--help` grouped under headings with
//! every variable shown; a TOML file under the environment under the flags; `--check-config`
//! printing the effective configuration (TOML, sources, secrets redacted) that loads back as a
//! file; one-line errors naming the file and the key; `--seed` only in test mode; metrics never
//! on the public port; and the deployment files (`deploy/`): the systemd unit accepted by
//! `systemd-analyze verify`, the container file's shape.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn relay() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_relay"));
    // The test's own environment must not leak into what is checked.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if (key.starts_with("RELAY_") && !key.starts_with("RELAY_TEST_"))
            || key == "DATABASE_URL"
            || key == "PGPASSWORD"
        {
            command.env_remove(key);
        }
    }
    command
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn write(dir: &Path, name: &str, contents: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

#[test]
fn help_groups_the_flags_under_headings_and_names_each_variable() {
    let out = relay().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = text(&out.stdout);
    let mut at = 0;
    for heading in [
        "\nListen:",
        "\nStore:",
        "\nSecrets:",
        "\nPush:",
        "\nPayments:",
        "\nLimits:",
        "\nLogs, metrics and configuration:",
        "\nTest only (never in production):",
    ] {
        let found = help[at..]
            .find(heading)
            .unwrap_or_else(|| panic!("{heading:?} missing or out of order:\n{help}"));
        at += found;
    }
    for shown in [
        "[env: RELAY_LISTEN=",
        "[env: RELAY_MAX_QUEUED_BYTES=",
        "[env: RELAY_METRICS_LISTEN=",
        "[env: RELAY_PAYMENT_WEBHOOK_SECRET]",
        "[env: RELAY_SEED=",
        "backup",
        "restore",
    ] {
        assert!(help.contains(shown), "{shown} not in --help");
    }
    for sub in ["backup", "restore"] {
        let out = relay().args([sub, "--help"]).output().unwrap();
        assert!(out.status.success(), "{sub} --help");
        assert!(text(&out.stdout).contains("--data <DIR>"));
    }
}

#[test]
fn check_config_shows_each_source_redacts_secrets_and_loads_back() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "relay.toml",
        "memory = true\nmax-queued-bytes = 5000\npush-allow-host = [\"push.example.org\"]\n\
         pow-difficulty = 4\n",
    );
    let out = relay()
        .args([
            "--config",
            file.to_str().unwrap(),
            "--check-config",
            "--pow-difficulty",
            "1",
        ])
        .env(
            "RELAY_PAYMENT_WEBHOOK_SECRET",
            "canary-webhook-secret-31337",
        )
        .env("RELAY_MAX_CONNECTIONS", "77")
        .env(
            "DATABASE_URL",
            "postgresql://relay:hunter2@db.internal/chat",
        )
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}{stdout}", text(&out.stderr));
    for line in [
        "pow-difficulty = 1  # flag",
        "max-connections = 77  # env RELAY_MAX_CONNECTIONS",
        "max-queued-bytes = 5000  # file",
        "memory = true  # file",
        "push-allow-host = [\"push.example.org\"]  # file",
        "listen = \"127.0.0.1:8080\"  # default",
        "# payment-webhook-secret = <redacted>  # env RELAY_PAYMENT_WEBHOOK_SECRET",
        "postgresql://relay:***@db.internal/chat",
        "# configuration OK",
    ] {
        assert!(stdout.contains(line), "{line:?} not in:\n{stdout}");
    }
    for secret in ["canary-webhook-secret-31337", "hunter2"] {
        assert!(!stdout.contains(secret), "{secret} printed");
    }
    // What it printed is a configuration file that gives the same configuration.
    let printed = write(dir.path(), "printed.toml", &stdout);
    toml::from_str::<toml::Table>(&stdout).expect("--check-config prints TOML");
    let again = relay()
        .args(["--config", printed.to_str().unwrap(), "--check-config"])
        .output()
        .unwrap();
    let again_out = text(&again.stdout);
    assert!(again.status.success(), "{}", text(&again.stderr));
    for line in [
        "pow-difficulty = 1  # file",
        "max-connections = 77  # file",
        "memory = true  # file",
    ] {
        assert!(again_out.contains(line), "{line:?} not in:\n{again_out}");
    }
}

#[test]
fn configuration_mistakes_are_one_line_with_the_file_the_key_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    for (contents, expected) in [
        (
            "memory = true\nlisten-addr = \"0.0.0.0:80\"\n",
            "unknown key `listen-addr`",
        ),
        (
            "memory = true\nmax-connections = \"many\"\n",
            "key `max-connections`",
        ),
        (
            "memory = true\npayment-webhook-secret = \"s3cr3t\"\n",
            "payment-webhook-secret-file",
        ),
        ("memory = true\n[push]\n", "key `push`"),
        ("memory = \"yes\n", "relay.toml:1:"),
    ] {
        let file = write(dir.path(), "relay.toml", contents);
        let out = relay()
            .args(["--config", file.to_str().unwrap(), "--check-config"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{contents}");
        let stderr = text(&out.stderr);
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(file.to_str().unwrap()), "{stderr}");
        assert!(stderr.contains(expected), "{expected:?} not in {stderr}");
        assert!(!stderr.contains("s3cr3t"), "{stderr}");
    }
}

#[test]
fn the_seed_is_refused_outside_test_mode() {
    let out = relay().args(["--memory", "--seed", "7"]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--test-mode"),
        "{}",
        text(&out.stderr)
    );
    let out = relay()
        .args(["--memory", "--seed", "7", "--test-mode", "--check-config"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = relay()
        .args(["--memory", "--check-config"])
        .env("RELAY_SEED", "7")
        .output()
        .unwrap();
    assert!(!out.status.success(), "RELAY_SEED without test mode");
}

#[test]
fn metrics_are_never_served_on_the_public_port() {
    for (listen, metrics) in [
        ("127.0.0.1:8080", "127.0.0.1:8080"),
        ("0.0.0.0:8080", "127.0.0.1:8080"),
    ] {
        let out: Output = relay()
            .args([
                "--memory",
                "--listen",
                listen,
                "--metrics-listen",
                metrics,
                "--check-config",
            ])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{listen} {metrics}");
        assert!(
            text(&out.stderr).contains("public port"),
            "{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn metrics_leave_loopback_only_when_the_operator_says_so() {
    for metrics in ["0.0.0.0:9464", "[::]:9464", "10.1.2.3:9464"] {
        let out = relay()
            .args(["--memory", "--metrics-listen", metrics, "--check-config"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{metrics}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("not a loopback address") && stderr.contains("--metrics-public"),
            "{stderr}"
        );
        let out = relay()
            .args(["--memory", "--metrics-listen", metrics, "--metrics-public"])
            .arg("--check-config")
            .output()
            .unwrap();
        assert!(out.status.success(), "{metrics}: {}", text(&out.stderr));
        let out = relay()
            .args(["--memory", "--metrics-listen", metrics, "--check-config"])
            .env("RELAY_METRICS_PUBLIC", "true")
            .output()
            .unwrap();
        assert!(out.status.success(), "{metrics}: {}", text(&out.stderr));
    }
    for metrics in ["127.0.0.1:9464", "[::1]:9464"] {
        let out = relay()
            .args(["--memory", "--metrics-listen", metrics, "--check-config"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{metrics}: {}", text(&out.stderr));
    }
}

/// A relay whose port (or metrics port) is taken fails before it creates anything: no data
/// directory, no key, no database file is left behind.
#[test]
fn a_relay_on_a_busy_port_fails_before_it_creates_anything() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = taken.local_addr().unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    for (i, ports) in [
        ["--listen", busy.as_str(), "--metrics-listen", "127.0.0.1:0"],
        ["--listen", "127.0.0.1:0", "--metrics-listen", busy.as_str()],
    ]
    .iter()
    .enumerate()
    {
        let data = tmp.path().join(format!("data-{i}"));
        let out = relay()
            .args(["--data", data.to_str().unwrap()])
            .args(ports)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{ports:?}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(&busy), "{ports:?}: {stderr}");
        assert!(!data.exists(), "{ports:?}: {} was created", data.display());
    }
}

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    let unit = std::fs::read_to_string(repo_file("deploy/relay.service")).unwrap();
    for directive in [
        "User=relay",
        "StateDirectory=relay",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "CapabilityBoundingSet=\n",
        "SystemCallFilter=@system-service",
        "KillSignal=SIGTERM",
        "ExecStart=/usr/local/bin/relay --config /etc/relay/relay.toml",
    ] {
        assert!(
            unit.contains(directive),
            "{directive} not in deploy/relay.service"
        );
    }
    assert!(
        !unit.contains("--payment-webhook-secret "),
        "a secret on the command line"
    );
    let Ok(version) = Command::new("systemd-analyze").arg("--version").output() else {
        assert!(
            std::env::var_os("RELAY_TEST_SYSTEMD_REQUIRED").is_none(),
            "systemd-analyze is required here"
        );
        eprintln!("SKIPPED the_systemd_unit_passes_systemd_analyze_verify: no systemd-analyze");
        return;
    };
    assert!(version.status.success());
    // verify checks that ExecStart's program exists: point it at the binary just built.
    let dir = tempfile::tempdir().unwrap();
    let here = unit.replace("/usr/local/bin/relay", env!("CARGO_BIN_EXE_relay"));
    let path = write(dir.path(), "relay.service", &here);
    let out = Command::new("systemd-analyze")
        .args(["verify", path.to_str().unwrap()])
        .output()
        .unwrap();
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "systemd-analyze verify refused the unit:\n{said}"
    );
    assert!(
        !said.contains("relay.service"),
        "systemd-analyze verify warned:\n{said}"
    );
}

#[test]
fn the_container_file_builds_in_two_stages_and_runs_unprivileged() {
    let file = std::fs::read_to_string(repo_file("deploy/Containerfile")).unwrap();
    let stages: Vec<&str> = file.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(stages.len(), 2, "{stages:?}");
    assert!(stages[0].ends_with(" AS build"));
    for line in [
        "cargo build --release --locked -p relay-server --bin relay",
        "COPY --from=build",
        "USER relay",
        "STOPSIGNAL SIGTERM",
        "VOLUME [\"/var/lib/relay\"]",
        "ENTRYPOINT [\"/usr/local/bin/relay\"]",
    ] {
        assert!(file.contains(line), "{line} not in deploy/Containerfile");
    }
    let ignore = std::fs::read_to_string(repo_file("deploy/Containerfile.dockerignore")).unwrap();
    assert!(ignore.lines().any(|l| l == "target"));
}

/// The cluster's example files (`deploy/cluster/`): a node's configuration passes
/// `--check-config` as a cluster node (its keys and directories redirected to a temporary
/// directory), and HAProxy's keeps the nodes' links private, names the client and checks
/// readiness.
#[test]
fn the_cluster_example_is_a_cluster_node_behind_a_load_balancer_it_believes() {
    let dir = tempfile::tempdir().unwrap();
    let out = relay()
        .args([
            "--config",
            repo_file("deploy/cluster/relay-node.toml")
                .to_str()
                .unwrap(),
            "--check-config",
        ])
        .env("RELAY_SECRETS_DIR", dir.path().join("secrets"))
        .env("RELAY_BLOB_DIR", dir.path().join("blobs"))
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}{stdout}", text(&out.stderr));
    for line in [
        "cluster-node = \"n1\"  # file",
        "shards = 12  # file",
        "trusted-proxy = [\"10.0.0.10\"]  # file",
        "listen = \"10.0.0.11:8080\"  # file",
    ] {
        assert!(stdout.contains(line), "{line} not in:\n{stdout}");
    }
    let haproxy = std::fs::read_to_string(repo_file("deploy/cluster/haproxy.cfg")).unwrap();
    for directive in [
        "http-request deny deny_status 404 if { path_beg /cluster/ }",
        "option forwardfor",
        "option httpchk GET /readyz",
        "timeout tunnel",
        "server n1 10.0.0.11:8080 check",
    ] {
        assert!(
            haproxy.contains(directive),
            "{directive} not in deploy/cluster/haproxy.cfg"
        );
    }
}
