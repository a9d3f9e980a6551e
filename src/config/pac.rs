//! `[pac]` (and `[pac.backup]`): which PAC stamps, where and with which credentials.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::Settings;

/// Which PAC the `[pac]` table selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PacKind {
    /// The sandbox PAC ([`crate::pacsim`]), in-process unless `url` points at a running one.
    #[default]
    Sandbox,
    Sw,
    Finkok,
}

impl PacKind {
    /// As written in `[pac] kind` and in the attempt log.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sandbox => "sandbox",
            Self::Sw => "sw",
            Self::Finkok => "finkok",
        }
    }
}

/// Whether a PAC connection stamps for real (`production`) or only tries (`test`: SW's and
/// Finkok's test services, the sandbox). Test-mode payments go only to test environments,
/// live payments only to production; the sandbox takes both, being the appliance's trial mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PacEnvironment {
    Test,
    Production,
}

impl PacEnvironment {
    pub fn name(self) -> &'static str {
        match self {
            Self::Test => "test",
            Self::Production => "production",
        }
    }
}

/// Why a payment is not sent to a PAC of environment `env` (`sandbox`: the sandbox, which
/// takes both): `(error code, message)` for the held document, `None` when it may be sent.
pub fn environment_mismatch(
    env: PacEnvironment,
    sandbox: bool,
    livemode: bool,
) -> Option<(&'static str, &'static str)> {
    match (sandbox, env, livemode) {
        (true, _, _) => None,
        (false, PacEnvironment::Production, false) => Some((
            "test_mode",
            "test-mode payment: never sent to a production PAC ([pac] environment is production)",
        )),
        (false, PacEnvironment::Test, true) => Some((
            "live_to_test_pac",
            "live payment: never sent to a test PAC, whose stamps have no fiscal value ([pac] environment is test); point [pac] at production",
        )),
        _ => None,
    }
}

/// The hosts of SW's and Finkok's services and the environment each one is.
const KNOWN_PAC_HOSTS: &[(&str, PacEnvironment)] = &[
    ("services.test.sw.com.mx", PacEnvironment::Test),
    ("api.test.sw.com.mx", PacEnvironment::Test),
    ("demo-facturacion.finkok.com", PacEnvironment::Test),
    ("services.sw.com.mx", PacEnvironment::Production),
    ("api.sw.com.mx", PacEnvironment::Production),
    ("facturacion.finkok.com", PacEnvironment::Production),
];

/// The environment of a known PAC URL (exact host, any scheme, port or path).
fn known_environment(url: &str) -> Option<PacEnvironment> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.split(['/', ':', '?']).next().unwrap_or(rest);
    KNOWN_PAC_HOSTS
        .iter()
        .find(|(h, _)| host.eq_ignore_ascii_case(h))
        .map(|(_, e)| *e)
}

/// The `[pac]` configuration table (and `[pac.backup]`, same keys).
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PacConfig {
    pub kind: PacKind,
    /// Base URL of the PAC's stamping service (SW: `https://services.sw.com.mx`; Finkok:
    /// `https://facturacion.finkok.com`). For the sandbox: a running `pac-sim`, or empty to run
    /// one in-process.
    pub url: Option<String>,
    /// SW's "api" host (datawarehouse). Derived from `url` when absent.
    pub api_url: Option<String>,
    /// The SAT status service (`ConsultaCFDIService.svc`). Default: SAT production; for the
    /// sandbox, the sandbox's own.
    pub sat_status_url: Option<String>,
    pub user: Option<String>,
    pub password: Option<String>,
    /// SW long-lived token, instead of user and password.
    pub token: Option<String>,
    /// Seconds to establish a connection.
    pub connect_timeout: u64,
    /// Seconds for a whole request.
    pub request_timeout: u64,
    /// Finkok: seconds to keep polling `stamped` after a `307` with an empty body.
    pub stamped_wait: u64,
    /// In-process sandbox: where its state lives (default: next to the database).
    pub sandbox_state: Option<PathBuf>,
    /// In-process sandbox: a fault spec (see [`crate::pacsim::faults`]).
    pub sandbox_faults: Option<String>,
    /// `test` or `production`: required for `sw` and `finkok` at a URL other than their known
    /// ones (which set it); the sandbox is always `test`.
    pub environment: Option<PacEnvironment>,
    /// A second PAC, used only when the primary definitely did not stamp.
    pub backup: Option<Box<PacConfig>>,
}

impl Default for PacConfig {
    fn default() -> Self {
        Self {
            kind: PacKind::Sandbox,
            url: None,
            api_url: None,
            sat_status_url: None,
            user: None,
            password: None,
            token: None,
            connect_timeout: 10,
            request_timeout: 60,
            stamped_wait: 12,
            sandbox_state: None,
            sandbox_faults: None,
            environment: None,
            backup: None,
        }
    }
}

impl PacConfig {
    /// The name the backup PAC is paused under (the primary's is its kind's name), distinct
    /// even when both are of one kind: `finkok-backup`.
    pub fn backup_name(&self) -> Option<String> {
        self.backup
            .as_ref()
            .map(|b| format!("{}-backup", b.kind.name()))
    }
}

impl fmt::Debug for PacConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redact = |v: &Option<String>| v.as_ref().map(|_| "[redacted]");
        f.debug_struct("PacConfig")
            .field("kind", &self.kind)
            .field("url", &self.url)
            .field("api_url", &self.api_url)
            .field("sat_status_url", &self.sat_status_url)
            .field("user", &self.user)
            .field("password", &redact(&self.password))
            .field("token", &redact(&self.token))
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("stamped_wait", &self.stamped_wait)
            .field("sandbox_state", &self.sandbox_state)
            .field("sandbox_faults", &self.sandbox_faults)
            .field("environment", &self.environment)
            .field("backup", &self.backup)
            .finish()
    }
}

impl PacConfig {
    /// Whether this connection is a test or a production environment: the sandbox is a test
    /// one; SW's and Finkok's known URLs say which; any other URL needs `environment`. `Err`
    /// says what to set.
    pub fn environment(&self) -> Result<PacEnvironment, String> {
        let kind = self.kind.name();
        if self.kind == PacKind::Sandbox {
            return match self.environment {
                Some(PacEnvironment::Production) => Err(
                    "environment = \"production\" with kind = \"sandbox\": the sandbox never stamps for real; remove the key"
                        .into(),
                ),
                _ => Ok(PacEnvironment::Test),
            };
        }
        let url = self.url.as_deref().unwrap_or("");
        match (known_environment(url), self.environment) {
            (Some(known), Some(set)) if known != set => Err(format!(
                "environment = {:?} but {} is {kind}'s {} service: remove the key or fix the url",
                set.name(),
                super::url_for_log(url),
                known.name()
            )),
            (Some(known), _) => Ok(known),
            (None, Some(set)) => Ok(set),
            (None, None) => Err(format!(
                "environment = \"test\" or \"production\" is required with kind = \"{kind}\" at {}: it is not one of {kind}'s known URLs, so say which environment it is",
                super::url_for_log(url)
            )),
        }
    }

    /// Pushes the problem of [`PacConfig::environment`], prefixed by the table's name.
    pub(super) fn check_environment(&self, table: &str, p: &mut Vec<String>) {
        if let Err(e) = self.environment() {
            p.push(format!("{table} {e}"));
        }
    }
}

impl Settings {
    /// The environment of `[pac]` (validation made sure it is known).
    pub fn pac_environment(&self) -> PacEnvironment {
        self.pac.environment().unwrap_or(PacEnvironment::Production)
    }

    /// `[pac] kind` and its environment, as the banner and the admin name it.
    pub fn pac_environment_label(&self) -> String {
        let env = self.pac_environment();
        let rule = if self.is_sandbox() {
            "test-mode and live payments are both stamped by the sandbox (no fiscal value)"
        } else if env == PacEnvironment::Test {
            "test-mode payments are stamped; live payments are held in needs_attention"
        } else {
            "live payments are stamped; test-mode payments are held in needs_attention"
        };
        format!("{} ({} environment): {rule}", self.pac_kind(), env.name())
    }
}

impl Settings {
    /// `[pac]` as the PAC module connects with it. The in-process sandbox keeps its journal next
    /// to the SQLite database (or under `data/` with PostgreSQL) unless `sandbox_state` says
    /// where; that folder is created here.
    pub fn pac_config(&self) -> anyhow::Result<PacConfig> {
        let mut cfg = self.pac.clone();
        if cfg.sandbox_state.is_none() {
            let url = self.database.url.expose();
            let dir = url
                .strip_prefix("sqlite://")
                .or_else(|| url.strip_prefix("sqlite:"))
                .map(|p| p.split('?').next().unwrap_or(p))
                .and_then(|p| std::path::Path::new(p).parent().map(|d| d.to_path_buf()))
                .unwrap_or_else(|| std::path::PathBuf::from("data"));
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(&dir)
                    .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
            }
            cfg.sandbox_state = Some(dir.join("pacsim-state.jsonl"));
        }
        Ok(cfg)
    }
}

/// Takes a `[pac] kind` that names no PAC out of the merged table, so that the rest still
/// types and validation reports the kind with every other problem.
pub(super) fn take_unknown_kind(merged: &mut toml::Table) -> Option<String> {
    let pac = merged.get_mut("pac")?.as_table_mut()?;
    let kind = pac.get("kind")?.as_str()?;
    let known = [PacKind::Sandbox, PacKind::Sw, PacKind::Finkok]
        .iter()
        .any(|k| k.name() == kind);
    if known {
        return None;
    }
    let kind = kind.to_owned();
    pac.remove("kind");
    Some(kind)
}
