//! The ARCA lane of the worker pool (wherever a pool runs: `serve`, `autofactura worker`):
//! ARS sales become ARCA vouchers.
//!
//! Ingest freezes a sale in ARS (Mercado Pago's or Stripe's) in the outbox when `[arca]` is on
//! (kind `arca`, `arca_pending`: its voucher's type and input, [`super::order`]; no CFDI).
//! Each round takes the WSAA ticket ([`Wsaa::ticket`]) and issues every pending
//! order through the exactly-once [`Issuer`] under its key `{provider}:{payment_id}`: a repeat of the key (a
//! restart, another instance, a `kill -9` between the CAE and the sale's update) returns the
//! stored outcome or resolves the key's own number, never a new voucher. An outcome not known
//! yet (lost answer, ARCA down, another instance on the sequence) leaves the sale pending for
//! the next round, and the other sales of its sequence with it. A round's sales of one sequence
//! go `[arca] batch` per `FECAESolicitar` (capped by ARCA's `FECompTotXRequest`), in order;
//! the sequences go in parallel (each is numbered on its own). Every answer is read as one of
//! the [`crate::domain::Verdict`]s the PAC's answers are read as ([`Issuer`] is an
//! [`Authority`]). A
//! sale a human corrected (`/admin/arca`) is frozen again for the corrected buyer under the
//! attempt key the correction was given (`{provider}:{payment_id}#n`, never used before); an authorized
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
use super::model::{CbteAsoc, CbteTipo, VoucherInput};
use super::order::{Correction, Order, freeze};
use super::wsaa::Wsaa;
use super::wsfe::{Auth, Wsfe};
use crate::config::ArcaSettings;
use crate::domain::{Authority, PaymentStatus, RefundStatus, Verdict};
use crate::store::{ArcaDraft, ArcaOrderRow, ArcaRefundRow, Db};

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

    /// One round: every frozen sale and nota de crédito issued; then the notas of refunds
    /// whose sale is authorized (this round's too) frozen, and issued. Returns how many sales
    /// and refunds were settled.
    pub async fn round(&self) -> anyhow::Result<usize> {
        self.freeze_unfrozen().await?;
        let (mut settled, _) = self.freeze_notas().await?;
        let orders = self.db.arca_orders(BATCH).await?;
        if orders.is_empty() {
            return Ok(settled);
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
        settled += self.issue_orders(&wsfe, orders).await?;
        let (held, frozen) = self.freeze_notas().await?;
        settled += held;
        if frozen > 0 {
            let orders = self.db.arca_orders(BATCH).await?;
            settled += self.issue_orders(&wsfe, orders).await?;
        }
        Ok(settled)
    }

    /// Issues frozen `orders` (sales and notas de crédito): each sequence's together, in
    /// order, `batch` of them per request, the sequences in parallel; how many were settled.
    async fn issue_orders(&self, wsfe: &Wsfe, orders: Vec<ArcaOrderRow>) -> anyhow::Result<usize> {
        let timeout = StdDuration::from_secs(self.cfg.timeout_seconds);
        let pto_vta = self
            .cfg
            .punto_venta
            .context("[arca] punto_venta is required")?;
        let limit = self.max_records(wsfe).await;
        let mut settled = 0;
        let mut groups: Groups<(ArcaOrderRow, VoucherInput, Option<String>)> = Vec::new();
        for order in orders {
            match self.plan_order(&order).await? {
                Err(why) => {
                    self.order_settled(&order, Err(why)).await?;
                    settled += 1;
                }
                Ok((tipo, input, note)) => group(&mut groups, tipo, (order, input, note)),
            }
        }
        let sends = groups.iter().map(|(tipo, items)| {
            let issuer = Issuer::new(
                self.db.clone(),
                wsfe.clone(),
                self.cfg.environment,
                pto_vta,
                *tipo,
                timeout,
            );
            let pairs = items
                .iter()
                .map(|(o, i, _)| (o.stamp_key.clone(), i.clone()));
            (issuer, pairs.collect())
        });
        let results = self.issue_groups(sends.collect(), limit).await?;
        for ((_, items), got) in groups.iter().zip(results) {
            for ((order, _, note), result) in items.iter().zip(got) {
                let Some(result) = result else { continue };
                let result = result.map(|text| match note {
                    Some(n) => format!("{text} ({n})"),
                    None => text,
                });
                self.order_settled(order, result).await?;
                settled += 1;
            }
        }
        Ok(settled)
    }

    /// Freezes the nota de crédito of each refund waiting for one whose sale ARCA authorized
    /// (in the outbox, with a payment row of its own, as an egreso); a refund that cannot be
    /// credited is held. `(held, frozen)`.
    async fn freeze_notas(&self) -> anyhow::Result<(usize, usize)> {
        let (mut held, mut frozen) = (0, 0);
        for refund in self.db.arca_unfrozen_refunds(BATCH).await? {
            match self.plan_refund(&refund).await? {
                None => {}
                Some(Err(why)) => {
                    let key = format!("refund:{}:{}", refund.provider, refund.refund_id);
                    self.refund_settled((refund.id, None), &key, Err(why))
                        .await?;
                    held += 1;
                }
                Some(Ok((tipo, input, key))) => {
                    let order = Order {
                        tipo: tipo.code(),
                        input,
                        note: None,
                    };
                    let draft = ArcaDraft {
                        key,
                        order: Ok(order.to_json()),
                    };
                    if self.db.arca_freeze_nota(refund.id, &draft).await? {
                        frozen += 1;
                    }
                }
            }
        }
        Ok((held, frozen))
    }

    /// Settles a frozen order: a sale, or a refund's nota de crédito.
    async fn order_settled(
        &self,
        order: &ArcaOrderRow,
        result: Result<String, String>,
    ) -> anyhow::Result<()> {
        match order.refund_row {
            Some(refund_row) => {
                let rows = (refund_row, Some(order.payment_row));
                self.refund_settled(rows, &order.stamp_key, result).await
            }
            None => self.sale_settled(order, result).await,
        }
    }

    async fn sale_settled(
        &self,
        sale: &ArcaOrderRow,
        result: Result<String, String>,
    ) -> anyhow::Result<()> {
        let (status, reason) = match result {
            Ok(text) => (PaymentStatus::ArcaAuthorized, text),
            Err(why) => (PaymentStatus::NeedsAttention, format!("ARCA: {why}")),
        };
        self.db
            .arca_sale_settled_mailed(
                sale.payment_row,
                (status, &reason),
                self.mail_domain.as_deref(),
            )
            .await?;
        tracing::info!(payment = %sale.payment_id, status = status.as_str(), %reason, "ARS sale settled");
        Ok(())
    }

    /// Settles refund `rows.0` (and its nota's payment row and outbox row, `rows.1`, once
    /// frozen) under the nota's `key`.
    async fn refund_settled(
        &self,
        rows: (i64, Option<i64>),
        key: &str,
        result: Result<String, String>,
    ) -> anyhow::Result<()> {
        let (status, reason) = match result {
            Ok(text) => (RefundStatus::ArcaCredited, text),
            Err(why) => (RefundStatus::NeedsAttention, format!("ARCA: {why}")),
        };
        let mail = self.mail_domain.as_deref();
        self.db
            .arca_refund_settled_mailed(rows, (status, &reason), mail)
            .await?;
        tracing::info!(%key, status = status.as_str(), %reason, "ARS refund settled");
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

    /// A frozen order's voucher: its type, its input, and a note on what of the buyer's data
    /// was not used; `Err` says why it cannot be issued (an order this version cannot read).
    /// A key issued before keeps the type and input it was bound to (one an earlier version
    /// issued before it froze orders: never a second voucher for a sale).
    async fn plan_order(
        &self,
        order: &ArcaOrderRow,
    ) -> anyhow::Result<Result<(CbteTipo, VoucherInput, Option<String>), String>> {
        let key = &order.stamp_key;
        if let Some(v) = self.db.arca_voucher(key).await? {
            let tipo = CbteTipo::from_code(v.cbte_tipo)
                .with_context(|| format!("voucher type {} of {key}", v.cbte_tipo))?;
            let input = serde_json::from_str(&v.input).context("a stored voucher")?;
            return Ok(Ok((tipo, input, None)));
        }
        Ok(Order::from_json(&order.request_json)
            .and_then(|o| Ok((o.cbte_tipo()?, o.input, o.note))))
    }

    /// Freezes the ARS sales an earlier version recorded `arca_pending` without their
    /// voucher (it planned them here, each round): under the key and buyer of their last
    /// correction, if a human made one.
    async fn freeze_unfrozen(&self) -> anyhow::Result<()> {
        for sale in self.db.arca_unfrozen_sales(BATCH).await? {
            let fix = self
                .db
                .arca_correction(&sale.provider, &sale.payment_id)
                .await?;
            let key = super::issue::attempt_key(
                &format!("{}:{}", sale.provider, sale.payment_id),
                fix.as_ref()
                    .map_or(1, |c| u32::try_from(c.attempt).unwrap_or(1)),
            );
            let given = fix.as_ref().map(|c| Correction {
                doc_kind: &c.doc_kind,
                doc_number: &c.doc_number,
                condicion_iva: &c.condicion_iva,
            });
            let order = freeze(&self.cfg, &sale.amount, &sale.customer_json, given);
            let draft = ArcaDraft {
                key,
                order: order.map(|o| o.to_json()),
            };
            if self.db.arca_freeze(&sale, &draft).await? {
                tracing::info!(payment = %sale.payment_id, key = %draft.key, "ARS sale recorded before its voucher was frozen: frozen now");
            }
        }
        Ok(())
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
