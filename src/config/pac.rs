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
            .field("backup", &self.backup)
            .finish()
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
