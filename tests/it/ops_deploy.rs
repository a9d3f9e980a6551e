//! The deploy files agree with the appliance (issue 22): `fly.toml` checks `/readyz`, gives the
//! worker's drain time before the kill, keeps the SQLite file on its volume and runs no release
//! command that would migrate a throwaway copy of it; the Dockerfile builds `--locked` as a
//! non-root user without curl; `.dockerignore` keeps build output, history and data out.

use std::path::Path;

use autofactura::config::Settings;

fn file(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn fly() -> toml::Table {
    file("fly.toml").parse().expect("fly.toml parses")
}

/// The settings a Fly machine runs with: the embedded defaults and `fly.toml`'s `[env]`.
fn fly_settings(fly: &toml::Table) -> Settings {
    let env: Vec<(String, String)> = fly["env"]
        .as_table()
        .expect("[env]")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().expect("string").to_owned()))
        .collect();
    Settings::from_parts(None, &env).expect("fly.toml's [env] is a valid configuration")
}

#[test]
fn fly_checks_readiness_and_outlasts_the_workers_drain() {
    let fly = fly();
    let settings = fly_settings(&fly);
    let service = fly["http_service"].as_table().expect("[http_service]");
    let checks = service["checks"].as_array().expect("checks");
    assert!(
        checks.iter().any(|c| c["path"].as_str() == Some("/readyz")),
        "{checks:?}"
    );
    let port = settings
        .server
        .listen
        .rsplit(':')
        .next()
        .and_then(|p| p.parse::<i64>().ok());
    assert_eq!(
        service["internal_port"].as_integer(),
        port,
        "the checked port serves"
    );
    assert_eq!(fly["kill_signal"].as_str(), Some("SIGTERM"));
    let kill = fly["kill_timeout"].as_integer().expect("kill_timeout");
    let grace = i64::try_from(settings.worker.shutdown_grace_seconds).expect("grace");
    assert!(
        kill > grace,
        "kill_timeout {kill} s within the drain's {grace} s"
    );
    let metrics = fly["metrics"].as_table().expect("[metrics]");
    assert_eq!(metrics["path"].as_str(), Some("/metrics"));
}

#[test]
fn fly_keeps_sqlite_on_its_volume_and_migrates_no_throwaway_copy() {
    let fly = fly();
    let settings = fly_settings(&fly);
    assert!(
        settings.is_sqlite(),
        "the default deploy is one machine on SQLite"
    );
    let mount = fly["mounts"]["destination"].as_str().expect("mount");
    let url = settings.database.url.expose().to_owned();
    let path = url.trim_start_matches("sqlite://");
    assert!(
        Path::new(path).starts_with(mount),
        "{url} is not on the volume at {mount}"
    );
    // Fly runs a release command on a machine without volumes: with SQLite it would migrate a
    // file thrown away with that machine; `serve` migrates the real one as it starts.
    let release = fly
        .get("deploy")
        .and_then(|d| d.get("release_command"))
        .and_then(|c| c.as_str());
    assert_eq!(release, None, "a release command with SQLite");
}

#[test]
fn the_image_builds_locked_runs_unprivileged_and_leaves_local_files_out() {
    let docker = file("Dockerfile");
    let lines: Vec<&str> = docker
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("cargo build --release --locked")),
        "{docker}"
    );
    assert!(
        lines.iter().any(|l| l.contains("cargo chef cook")),
        "cached dependencies"
    );
    let user = lines
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("USER");
    assert!(
        !user.starts_with("root") && !user.starts_with("0"),
        "{user}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("curl")),
        "no curl in the image"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("HEALTHCHECK") || l.contains("autofactura\", \"healthcheck")),
        "{docker}"
    );
    let ignore = file(".dockerignore");
    let ignored: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for must in ["target/", ".git/", "data/", "autofactura.toml", ".env"] {
        assert!(ignored.contains(&must), "{must} in the build context");
    }
}
