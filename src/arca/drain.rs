//! The background loop of `serve` and `worker` that turns ARS sales into ARCA vouchers.
//!
//! Ingest marks a Mercado Pago sale in ARS `arca_pending` when `[arca]` is on (no CFDI). Each
//! round takes the WSAA ticket ([`Wsaa::ticket`]) and issues every pending sale through the
//! exactly-once [`Issuer`] under the key `{provider}:{payment_id}`: a repeat of the key (a
//! restart, another instance, a `kill -9` between the CAE and the sale's update) returns the
//! stored outcome or resolves the key's own number, never a new voucher. An outcome not known
//! yet (lost answer, ARCA down, another instance on the sequence) leaves the sale pending for
//! the next round.

use std::time::Duration as StdDuration;

use anyhow::Context as _;
use rust_decimal::Decimal;
use tokio_util::sync::CancellationToken;

use super::model::{CbteTipo, VoucherInput};
use super::wsaa::Wsaa;
use super::wsfe::{Auth, Wsfe};
use super::{Issuer, Outcome};
use crate::config::{ArcaSettings, Receptor};
use crate::store::{ArcaSaleRow, Db};

/// Sales taken per round.
const BATCH: i64 = 50;

/// The issuing loop of one instance.
#[derive(Debug, Clone)]
pub struct Drainer {
    db: Db,
    cfg: ArcaSettings,
    wsaa: Wsaa,
    /// Whether ARCA confirmed that the punto de venta issues with CAE for the CUIT.
    point_checked: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// The voucher of an ARS sale of `total` pesos to an anonymous consumidor final: IVA at
/// `cfg`'s rate in classes A and B, none in class C.
pub fn sale_input(cfg: &ArcaSettings, tipo: CbteTipo, total: Decimal) -> VoucherInput {
    let alicuota = cfg.alicuota().unwrap_or(super::Alicuota::Veintiuno);
    let mut input = VoucherInput::consumidor_final(total, alicuota);
    if tipo == CbteTipo::FacturaC {
        input.imp_neto = total;
        input.imp_iva = Decimal::ZERO;
        input.iva.clear();
    }
    input
}

impl Drainer {
    /// The loop for `cfg` (which must be enabled and valid: [`crate::config::Settings`]
    /// checked it).
    pub fn new(db: Db, cfg: &ArcaSettings) -> anyhow::Result<Self> {
        let read = |p: &Option<std::path::PathBuf>, what: &str| -> anyhow::Result<Vec<u8>> {
            let p = p
                .as_ref()
                .with_context(|| format!("[arca] {what} is required"))?;
            std::fs::read(p).with_context(|| format!("[arca] {what} = {}", p.display()))
        };
        let timeout = StdDuration::from_secs(cfg.timeout_seconds);
        let wsaa = Wsaa::new(
            db.clone(),
            cfg.wsaa_url(),
            cfg.environment,
            (read(&cfg.cert, "cert")?, read(&cfg.key, "key")?),
            chrono::Duration::minutes(i64::try_from(cfg.ticket_renew_minutes).unwrap_or(10)),
            timeout,
        )?;
        Ok(Self {
            db,
            cfg: cfg.clone(),
            wsaa,
            point_checked: std::sync::Arc::default(),
        })
    }

    /// Rounds every `interval_seconds` until `token` is cancelled; a failed round is logged
    /// and tried again.
    pub async fn run(self, token: CancellationToken) {
        let every = StdDuration::from_secs(self.cfg.interval_seconds);
        loop {
            if let Err(e) = self.round().await {
                tracing::warn!(error = %format!("{e:#}"), "ARCA round failed; trying again");
            }
            tokio::select! {
                () = token.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
        }
    }

    /// One round: every pending sale issued or left for the next round. Returns how many
    /// sales were settled.
    pub async fn round(&self) -> anyhow::Result<usize> {
        let sales = self.db.arca_pending_sales(BATCH).await?;
        if sales.is_empty() {
            return Ok(0);
        }
        let ticket = self.wsaa.ticket().await?;
        let auth = Auth {
            token: ticket.token,
            sign: ticket.sign,
            cuit: self.cfg.cuit.context("[arca] cuit is required")?,
        };
        let timeout = StdDuration::from_secs(self.cfg.timeout_seconds);
        let wsfe = Wsfe::new(self.cfg.wsfe_url(), auth, timeout)?;
        self.check_point(&wsfe).await?;
        let tipo = self.cfg.factura_for(Receptor::ConsumidorFinal);
        let issuer = Issuer::new(
            self.db.clone(),
            wsfe,
            self.cfg.environment,
            self.cfg
                .punto_venta
                .context("[arca] punto_venta is required")?,
            tipo,
            timeout,
        );
        let mut settled = 0;
        for sale in sales {
            match self.issue(&issuer, tipo, &sale).await? {
                true => settled += 1,
                // The sequence waits (an outcome not known yet): the next round goes on.
                false => break,
            }
        }
        Ok(settled)
    }

    /// Once per process, before the first voucher: the configured punto de venta must be one of
    /// the CUIT's web-services points that issue with CAE (`FEParamGetPtosVenta`), else nothing
    /// is issued and every round says why. A failed call is not a verdict: issuing goes on.
    async fn check_point(&self, wsfe: &Wsfe) -> anyhow::Result<()> {
        use std::sync::atomic::Ordering;
        if self.point_checked.load(Ordering::SeqCst) {
            return Ok(());
        }
        let point = self.cfg.punto_venta.unwrap_or_default();
        match wsfe.ptos_venta().await {
            Ok(points) if points.contains(&point) => {
                self.point_checked.store(true, Ordering::SeqCst);
                Ok(())
            }
            Ok(points) => anyhow::bail!(
                "[arca] punto_venta = {point} is not a web-services point of sale issuing with CAE \
                 for CUIT {} at ARCA (it has {points:?}): create it as \"RECE / Factura \
                 Electrónica - Web Services\" (docs/arca.md); nothing is issued until then",
                wsfe.cuit()
            ),
            Err(e) => {
                tracing::warn!(error = %e, "FEParamGetPtosVenta failed; issuing without the check");
                Ok(())
            }
        }
    }

    /// Issues one sale; `false` when its outcome is not known yet.
    async fn issue(
        &self,
        issuer: &Issuer,
        tipo: CbteTipo,
        sale: &ArcaSaleRow,
    ) -> anyhow::Result<bool> {
        let key = format!("{}:{}", sale.provider, sale.payment_id);
        let attention = |why: String| ("needs_attention", format!("ARCA: {why}"));
        let (status, reason) = match sale.amount.parse::<Decimal>() {
            Err(_) => attention(format!("amount {:?} is not a number", sale.amount)),
            Ok(total) => match issuer
                .issue_sale(&key, &sale_input(&self.cfg, tipo, total))
                .await
            {
                Ok(Outcome::Authorized { number, cae, .. }) => (
                    "arca_authorized",
                    format!(
                        "Factura {} {:05}-{number:08}, CAE {} (due {})",
                        tipo.class(),
                        self.cfg.punto_venta.unwrap_or_default(),
                        cae.code,
                        cae.due
                    ),
                ),
                Ok(Outcome::Rejected { errors, .. }) => attention(format!(
                    "refused: {}",
                    errors
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ")
                )),
                Ok(Outcome::Conflict { number, detail }) => {
                    attention(format!("another voucher holds number {number}: {detail}"))
                }
                Ok(Outcome::Indeterminate { .. } | Outcome::Blocked { .. } | Outcome::Busy) => {
                    return Ok(false);
                }
                Err(e @ (super::IssueError::Mismatch(_) | super::IssueError::Invalid(_))) => {
                    attention(e.to_string())
                }
                Err(e) => return Err(e.into()),
            },
        };
        self.db.arca_sale_settled(sale.id, status, &reason).await?;
        tracing::info!(payment = %sale.payment_id, status, %reason, "ARS sale settled");
        Ok(true)
    }
}
