//! The ARCA lane of the worker pool (wherever a pool runs: `serve`, `autofactura worker`):
//! ARS sales become ARCA vouchers.
//!
//! Ingest marks a sale in ARS (Mercado Pago's or Stripe's) `arca_pending` when `[arca]` is on
//! (no CFDI). Each round takes the WSAA ticket ([`Wsaa::ticket`]) and issues every pending
//! sale through the exactly-once [`Issuer`] under the key `{provider}:{payment_id}`: a repeat of the key (a
//! restart, another instance, a `kill -9` between the CAE and the sale's update) returns the
//! stored outcome or resolves the key's own number, never a new voucher. An outcome not known
//! yet (lost answer, ARCA down, another instance on the sequence) leaves the sale pending for
//! the next round, and the other sales of its sequence with it. A round's sales of one sequence
//! go `[arca] batch` per `FECAESolicitar` (capped by ARCA's `FECompTotXRequest`), in order;
//! the sequences go in parallel (each is numbered on its own). Every answer is read as one of
//! the [`crate::domain::Verdict`]s the PAC's answers are read as ([`Issuer`] is an
//! [`Authority`]). A
//! sale a human corrected (`/admin/arca`) is issued to the corrected buyer under the attempt key
//! the correction was given (`{provider}:{payment_id}#n`, never used before); an authorized
//! sale's (or nota's) settle queues the buyer's email of its voucher (`[email]` on).
//!
//! The voucher names the buyer ([`super::buyer`]), whose IVA condition decides the class (A,
//! B or C, [`ArcaSettings::factura_for`]): one sequence per voucher type. A refund of an
//! authorized sale becomes a nota de crédito of the sale's class (its own sequence) under the
//! key `refund:{provider}:{refund id}`, crediting its share of the sale's amounts
//! ([`VoucherInput::credited`]) and naming the sale's voucher in `CbtesAsoc`; a refund waits
//! while its sale's voucher is not authorized.

use std::time::Duration as StdDuration;

use anyhow::Context as _;
use rust_decimal::Decimal;
use tokio_util::sync::CancellationToken;

use super::Issuer;
use super::buyer::{Given, buyer};
use super::model::{CbteAsoc, CbteTipo, VoucherInput};
use super::wsaa::Wsaa;
use super::wsfe::{Auth, Wsfe};
use crate::config::ArcaSettings;
use crate::domain::{Authority, Verdict};
use crate::store::{ArcaCorrection, ArcaRefundRow, ArcaSaleRow, Db};

/// Sales (and refunds) taken per round.
const BATCH: i64 = 250;

/// The issuing loop of one instance.
#[derive(Debug, Clone)]
pub struct Drainer {
    db: Db,
    cfg: ArcaSettings,
    wsaa: Wsaa,
    /// Whether ARCA confirmed that the punto de venta issues with CAE for the CUIT.
    point_checked: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// ARCA's most vouchers per request (`FECompTotXRequest`), 0 until asked.
    max_records: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// With `[email]` on, the domain of its `from`: an authorized sale queues its email.
    mail_domain: Option<String>,
}

/// What a round makes of each voucher of a group, in order: `None` when it is not known yet
/// (it waits for the next round), else the voucher as printed, or why it cannot be had.
type Outcomes = Vec<Option<Result<String, String>>>;

/// A round's items by sequence (voucher type), in the order their first item came.
type Groups<T> = Vec<(CbteTipo, Vec<T>)>;

/// Appends `item` to `tipo`'s group.
fn group<T>(groups: &mut Groups<T>, tipo: CbteTipo, item: T) {
    match groups.iter_mut().find(|(t, _)| *t == tipo) {
        Some((_, items)) => items.push(item),
        None => groups.push((tipo, vec![item])),
    }
}

/// The voucher of an ARS sale of `total` pesos of type `tipo`, to an anonymous consumidor
/// final until the caller names the buyer: IVA at `cfg`'s rate in classes A and B, none in
/// class C.
pub fn sale_input(cfg: &ArcaSettings, tipo: CbteTipo, total: Decimal) -> VoucherInput {
    let alicuota = cfg.alicuota().unwrap_or(super::Alicuota::Veintiuno);
    let mut input = VoucherInput::consumidor_final(total, alicuota);
    if tipo.class() == 'C' {
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
            max_records: std::sync::Arc::default(),
            mail_domain: None,
        })
    }

    /// Queues the buyer's email of each voucher authorized (`[email]` on: its `from`'s domain).
    pub fn mailing(mut self, domain: Option<String>) -> Self {
        self.mail_domain = domain;
        self
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

    /// One round: every pending sale issued, then every refund whose sale is authorized
    /// credited by its nota de crédito, or left for the next round. Returns how many sales and
    /// refunds were settled.
    pub async fn round(&self) -> anyhow::Result<usize> {
        let sales = self.db.arca_pending_sales(BATCH).await?;
        let refunds = self.db.arca_pending_refunds(BATCH).await?;
        if sales.is_empty() && refunds.is_empty() {
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
        let pto_vta = self
            .cfg
            .punto_venta
            .context("[arca] punto_venta is required")?;
        // The issuer of a sequence (voucher type) met this round.
        let issuer = |tipo: CbteTipo| {
            Issuer::new(
                self.db.clone(),
                wsfe.clone(),
                self.cfg.environment,
                pto_vta,
                tipo,
                timeout,
            )
        };
        let limit = self.max_records(&wsfe).await;
        let mut settled = 0;
        // Each sequence's sales together, in order, `batch` of them per request.
        let mut groups: Groups<(ArcaSaleRow, String, VoucherInput, Option<String>)> = Vec::new();
        for sale in sales {
            // A sale a human corrected goes on under the attempt given to the correction.
            let fix = self
                .db
                .arca_correction(&sale.provider, &sale.payment_id)
                .await?;
            let key = super::issue::attempt_key(
                &format!("{}:{}", sale.provider, sale.payment_id),
                fix.as_ref()
                    .map_or(1, |c| u32::try_from(c.attempt).unwrap_or(1)),
            );
            match self.plan_sale(&key, &sale, fix.as_ref()).await? {
                Err(why) => {
                    self.sale_settled(&sale, Err(why)).await?;
                    settled += 1;
                }
                Ok((tipo, input, note)) => group(&mut groups, tipo, (sale, key, input, note)),
            }
        }
        let sends = groups.iter().map(|(tipo, items)| {
            let pairs = items.iter().map(|(_, k, i, _)| (k.clone(), i.clone()));
            (issuer(*tipo), pairs.collect())
        });
        let results = self.issue_groups(sends.collect(), limit).await?;
        for ((_, items), got) in groups.iter().zip(results) {
            for ((sale, _, _, note), result) in items.iter().zip(got) {
                let Some(result) = result else { continue };
                let result = result.map(|text| match note {
                    Some(n) => format!("{text} ({n})"),
                    None => text,
                });
                self.sale_settled(sale, result).await?;
                settled += 1;
            }
        }
        let mut groups: Groups<(ArcaRefundRow, String, VoucherInput)> = Vec::new();
        for refund in refunds {
            // None: the sale's voucher is not authorized: not this round.
            match self.plan_refund(&refund).await? {
                None => {}
                Some(Err(why)) => {
                    self.refund_settled(&refund, Err(why)).await?;
                    settled += 1;
                }
                Some(Ok((tipo, input, key))) => group(&mut groups, tipo, (refund, key, input)),
            }
        }
        let sends = groups.iter().map(|(tipo, items)| {
            let pairs = items.iter().map(|(_, k, i)| (k.clone(), i.clone()));
            (issuer(*tipo), pairs.collect())
        });
        let results = self.issue_groups(sends.collect(), limit).await?;
        for ((_, items), got) in groups.iter().zip(results) {
            for ((refund, _, _), result) in items.iter().zip(got) {
                if let Some(result) = result {
                    self.refund_settled(refund, result).await?;
                    settled += 1;
                }
            }
        }
        Ok(settled)
    }

    async fn sale_settled(
        &self,
        sale: &ArcaSaleRow,
        result: Result<String, String>,
    ) -> anyhow::Result<()> {
        let (status, reason) = match result {
            Ok(text) => ("arca_authorized", text),
            Err(why) => ("needs_attention", format!("ARCA: {why}")),
        };
        self.db
            .arca_sale_settled_mailed(sale.id, (status, &reason), self.mail_domain.as_deref())
            .await?;
        tracing::info!(payment = %sale.payment_id, status, %reason, "ARS sale settled");
        Ok(())
    }

    async fn refund_settled(
        &self,
        refund: &ArcaRefundRow,
        result: Result<String, String>,
    ) -> anyhow::Result<()> {
        let (status, reason) = match result {
            Ok(text) => ("arca_credited", text),
            Err(why) => ("needs_attention", format!("ARCA: {why}")),
        };
        let mail = self.mail_domain.as_deref();
        self.db
            .arca_refund_settled_mailed(refund.id, (status, &reason), mail)
            .await?;
        tracing::info!(refund = %refund.refund_id, payment = %refund.payment_ref, status, %reason, "ARS refund settled");
        Ok(())
    }

    /// How many vouchers of `tipo` go in one request: `[arca] batch`, or one by one for a type
    /// ARCA does not batch.
    fn batch_size(&self, tipo: CbteTipo) -> usize {
        if tipo.batchable() {
            self.cfg.batch.max(1)
        } else {
            1
        }
    }

    /// ARCA's most vouchers per request (`FECompTotXRequest`), asked once per process; one
    /// while it cannot be asked.
    async fn max_records(&self, wsfe: &Wsfe) -> usize {
        use std::sync::atomic::Ordering;
        let known = self.max_records.load(Ordering::SeqCst);
        if known > 0 {
            return known;
        }
        match wsfe.max_records().await {
            Ok(n) if n > 0 => {
                self.max_records.store(n, Ordering::SeqCst);
                n
            }
            Ok(_) => 1,
            Err(e) => {
                tracing::warn!(error = %e, "FECompTotXRequest failed; sending vouchers one by one");
                1
            }
        }
    }

    /// A sale's voucher under `key`: its type, its input, and a note on what of the buyer's
    /// data was not used; `Err` says why the sale cannot be issued as it is. A key issued
    /// before keeps the type and input it was bound to (the settings, or this code, may have
    /// changed since: never a second voucher for a sale).
    async fn plan_sale(
        &self,
        key: &str,
        sale: &ArcaSaleRow,
        fix: Option<&ArcaCorrection>,
    ) -> anyhow::Result<Result<(CbteTipo, VoucherInput, Option<String>), String>> {
        if let Some(v) = self.db.arca_voucher(key).await? {
            let tipo = CbteTipo::from_code(v.cbte_tipo)
                .with_context(|| format!("voucher type {} of {key}", v.cbte_tipo))?;
            let input = serde_json::from_str(&v.input).context("a stored voucher")?;
            return Ok(Ok((tipo, input, None)));
        }
        Ok(self.new_sale_plan(sale, fix))
    }

    /// The buyer is the one a human corrected, else what the sale carried.
    fn new_sale_plan(
        &self,
        sale: &ArcaSaleRow,
        fix: Option<&ArcaCorrection>,
    ) -> Result<(CbteTipo, VoucherInput, Option<String>), String> {
        let total: Decimal = sale
            .amount
            .parse()
            .map_err(|_| format!("amount {:?} is not a number", sale.amount))?;
        let customer: serde_json::Value =
            serde_json::from_str(&sale.customer_json).unwrap_or_default();
        let ident = customer.get("identification");
        let field = |k: &str| {
            ident
                .and_then(|i| i.get(k))
                .and_then(serde_json::Value::as_str)
        };
        let given = match fix {
            Some(c) => Given {
                kind: Some(c.doc_kind.as_str()).filter(|k| !k.is_empty()),
                number: Some(c.doc_number.as_str()).filter(|n| !n.is_empty()),
                condicion_iva: Some(c.condicion_iva.as_str()),
            },
            None => Given {
                kind: field("kind"),
                number: field("number"),
                condicion_iva: field("condicion_iva"),
            },
        };
        let b = buyer(given, total, &self.cfg)?;
        let tipo = self.cfg.factura_for(b.receptor);
        let mut input = sale_input(&self.cfg, tipo, total);
        input.doc_tipo = b.doc_tipo;
        input.doc_nro = b.doc_nro;
        input.condicion_iva_receptor = b.receptor.id();
        Ok((tipo, input, b.note))
    }

    /// A refund's nota de crédito: its type, input and key (`refund:{provider}:{refund id}`);
    /// `None` while its sale's voucher is not authorized. A key issued before keeps the input
    /// it was bound to (what was credited before it may have changed since).
    async fn plan_refund(
        &self,
        r: &ArcaRefundRow,
    ) -> anyhow::Result<Option<Result<(CbteTipo, VoucherInput, String), String>>> {
        let key = format!("refund:{}:{}", r.provider, r.refund_id);
        let Some(sale) = self
            .db
            .arca_sale_voucher(&r.provider, &r.payment_ref)
            .await?
        else {
            return Ok(None);
        };
        let tipo = CbteTipo::from_code(sale.cbte_tipo)
            .with_context(|| format!("voucher type {} of {}", sale.cbte_tipo, sale.key))?
            .credit_note();
        if let Some(v) = self.db.arca_voucher(&key).await? {
            let input = serde_json::from_str(&v.input).context("a stored nota de crédito")?;
            return Ok(Some(Ok((tipo, input, key))));
        }
        let original: VoucherInput =
            serde_json::from_str(&sale.input).context("the sale's stored voucher")?;
        let dec = |t: &str| t.parse::<Decimal>().ok();
        let Some(amount) = dec(&r.amount).filter(|a| *a > Decimal::ZERO) else {
            return Ok(Some(Err(format!(
                "refund amount {:?} is not an amount",
                r.amount
            ))));
        };
        let before: Decimal = self
            .db
            .arca_credited_before(r)
            .await?
            .iter()
            .filter_map(|a| dec(a))
            .sum();
        if before + amount > original.imp_total {
            return Ok(Some(Err(format!(
                "refund of {amount} exceeds what remains of the voucher ({} of {})",
                original.imp_total - before,
                original.imp_total
            ))));
        }
        let mut input = original.credited(before, amount);
        input.cbtes_asoc = vec![CbteAsoc {
            tipo: sale.cbte_tipo,
            pto_vta: sale.pto_vta,
            nro: sale.number,
            cuit: sale.cuit,
            cbte_fch: sale.cbte_fch.parse().context("the sale's CbteFch")?,
        }];
        Ok(Some(Ok((tipo, input, key))))
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

    /// Issues each sequence's `(issuer, keys and inputs)` at once: ARCA numbers every sequence
    /// on its own, so sequences go in parallel, and within one, in order ([`Self::issue_group`],
    /// at most `limit` per request). For each group, in order, what it gave.
    async fn issue_groups(
        &self,
        groups: Vec<(Issuer, Vec<(String, VoucherInput)>)>,
        limit: usize,
    ) -> anyhow::Result<Vec<Outcomes>> {
        let mut set = tokio::task::JoinSet::new();
        let n = groups.len();
        for (at, (issuer, items)) in groups.into_iter().enumerate() {
            let me = self.clone();
            set.spawn(async move {
                let tipo = issuer.tipo;
                let pairs: Vec<(&str, &VoucherInput)> =
                    items.iter().map(|(k, i)| (k.as_str(), i)).collect();
                let size = me.batch_size(tipo).min(limit);
                (at, me.issue_group(&issuer, tipo, &pairs, size).await)
            });
        }
        let mut out = vec![Vec::new(); n];
        while let Some(done) = set.join_next().await {
            let (at, got) = done.context("a sequence's task")?;
            out[at] = got;
        }
        Ok(out)
    }

    /// Issues `items` (keys and inputs of one sequence, in order) as vouchers of `tipo`,
    /// `size` per request: for each, `None` when its outcome is not known yet, else the
    /// voucher as printed with its CAE, or why it cannot be had. Once one is not known, the
    /// later requests wait for the next round (said once per sequence in the log).
    async fn issue_group(
        &self,
        issuer: &Issuer,
        tipo: CbteTipo,
        items: &[(&str, &VoucherInput)],
        size: usize,
    ) -> Outcomes {
        let mut out = Vec::with_capacity(items.len());
        let mut waits: Option<String> = None;
        for chunk in items.chunks(size.max(1)) {
            if waits.is_some() {
                out.extend(chunk.iter().map(|_| None));
                continue;
            }
            let answers = match chunk {
                [(key, input)] => vec![Authority::issue(issuer, key, input).await],
                _ => match issuer.issue_sales(chunk).await {
                    Ok(answers) => answers,
                    // The sequence could not be served (nothing of the chunk was sent).
                    Err(e) => {
                        waits = Some(e.to_string());
                        out.extend(chunk.iter().map(|_| None));
                        continue;
                    }
                },
            };
            for a in &answers {
                match self.describe(tipo, a) {
                    Ok(settled) => out.push(Some(settled)),
                    Err(reason) => {
                        waits.get_or_insert(reason);
                        out.push(None);
                    }
                }
            }
        }
        if let Some(reason) = waits {
            let waiting = out.iter().filter(|o| o.is_none()).count();
            tracing::info!(voucher = tipo.name(), waiting, %reason, "ARS vouchers wait for the next round");
        }
        out
    }

    /// What an answer of `tipo` means for its sale ([`Issuer::verdict`]): the voucher as
    /// printed, or why it cannot be had; `Err` with the reason when it is not known yet or
    /// nothing happened (the sale waits for the next round, and its sequence's later sales
    /// with it).
    fn describe(
        &self,
        tipo: CbteTipo,
        answer: &<Issuer as Authority>::Answer,
    ) -> Result<Result<String, String>, String> {
        match Issuer::verdict(answer) {
            Verdict::Issued {
                document: (number, cae),
                ..
            } => Ok(Ok(format!(
                "{} {:05}-{number:08}, CAE {} (due {})",
                tipo.name(),
                self.cfg.punto_venta.unwrap_or_default(),
                cae.code,
                cae.due
            ))),
            Verdict::Rejected { message, .. } => Ok(Err(message)),
            Verdict::Retryable { reason, .. } | Verdict::Unknown { reason } => Err(reason),
        }
    }
}
