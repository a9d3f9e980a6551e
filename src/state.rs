//! What every request handler and background loop shares: [`AppState`], built by
//! [`crate::startup`] and handed to the HTTP handlers (webhooks, API, admin, health) and the
//! background loops. It builds nothing, so handlers import it instead of `startup` (which
//! imports them): only the types it holds are imported here.

use std::sync::Arc;

use crate::config::Settings;
use crate::health::Health;
use crate::ingest::Ingestor;
use crate::pac::PacClient;
use crate::store::Db;
use crate::webhooks::replay::ReplayWindow;
use crate::webhooks::{mercadopago, stripe_api};

/// What every request handler and background loop shares.
pub struct AppState {
    pub settings: Arc<Settings>,
    pub db: Db,
    pub ingestor: Ingestor,
    pub mp: mercadopago::Client,
    /// Where the TipoCambio of a sale in another currency comes from (`[fx]`).
    pub fx: crate::fx::Rates,
    /// The Stripe API (`[stripe] api_key`); `None`: sales are invoiced from the webhook alone.
    pub stripe: Option<stripe_api::Client>,
    /// Mercado Pago manifests received recently (replays are refused).
    pub mp_replay: ReplayWindow,
    /// Heartbeats of background loops, reported by `/readyz`.
    pub health: Health,
    /// The PAC (`[pac]`), shared by the workers and the admin.
    pub pac: Arc<PacClient>,
    /// The in-process sandbox PAC when `[pac]` asks for it (kept alive with the client).
    pub pac_sandbox: Option<crate::pacsim::SandboxHandle>,
    /// How PDFs are printed (`[pdf]`, the logo read at start).
    pub pdf: crate::pdf::PdfOptions,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("settings", &self.settings)
            .field("db", &self.db)
            .field("pac", &self.pac)
            .field("pac_sandbox", &self.pac_sandbox)
            .finish_non_exhaustive()
    }
}
