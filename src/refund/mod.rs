//! A refund (or a lost dispute) → the CFDI de egreso that credits it, without I/O.
//!
//! The egreso is cut out of the original document (the sale's frozen ingreso, or its concepto in
//! the factura global) in proportion to the money given back. Proportions are taken
//! *cumulatively*: a sale of amount `A` already refunded `b` and refunded `a` more gets, for each
//! line, `share(b + a) − share(b)`, where `share(c)` is the line's amount scaled by `c / A` to the
//! centavo, the centavos split over the lines by largest remainder so the lines of `share(c)` add
//! up to exactly `c / A` of the lines' total. So the egresos of a sale refunded in any number of
//! steps add up, line by line and to the centavo, to what the original charged, and the last one
//! (the rest) is exactly the original minus what earlier egresos credited. Each line's share is
//! then split into Base and taxes on whole centavos (`taxes.rs`), so an egreso's Total is
//! exactly its refund, and each tax group carries what keeps the running sum of the sale's
//! egresos on the original's, within Anexo 20's tolerance of each line's Base
//! (docs/refunds.md says when that is not possible).
//!
//! Files: `mod.rs` the cut and the [`Planner`]; `taxes.rs` the split of a line into Base and
//! taxes; `tests.rs` its unit tests. Imported by the webhooks (the planner, asked inside the
//! store's refund transaction) and tests.

use crate::domain::PaymentStatus;
use chrono::{DateTime, NaiveDateTime, Utc};
use rust_decimal::Decimal;

use crate::cfdi::money::round;
use crate::cfdi::{self, InvoiceRequest, LineData, RelacionadosData, TipoComprobante};
use crate::config::FullRefund;
use crate::domain::{DocumentKind, DocumentState, StampKey};
use crate::store::{NewPayment, NewRefund, OutboxDraft, RefundDecision, RefundSale};

mod taxes;

pub use taxes::{TaxGroup, TaxSums};

/// `c_TipoRelacion` 01: nota de crédito de los documentos relacionados.
pub const TIPO_RELACION_NOTA_DE_CREDITO: &str = "01";

/// UsoCFDI of a nominative egreso: G02, devoluciones, descuentos o bonificaciones.
pub const USO_CFDI_EGRESO: &str = "G02";

/// The provider of an egreso's own payment row (its `payment_id` is `{provider}:{refund_id}`).
pub const REFUND_PROVIDER: &str = "refund";

/// A refund a provider reported as succeeded, in our terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundFacts {
    pub provider: &'static str,
    /// The provider's id of this refund (Stripe `re_…`, Mercado Pago's refund id, a lost
    /// dispute's `dp_…`): the egreso's stamp key derives from it.
    pub refund_id: String,
    /// The sale's payment id at the provider.
    pub payment_ref: String,
    /// Major units, exact, positive.
    pub amount: Decimal,
    /// ISO 4217, uppercase.
    pub currency: String,
    pub refunded_at: DateTime<Utc>,
}

/// Where an egreso's money comes from: the document it credits and how much of the sale it
/// stands for.
#[derive(Debug, Clone)]
pub struct Original<'a> {
    /// The frozen request of the document it credits (the ingreso, or the factura global).
    pub request: &'a InvoiceRequest,
    /// Its UUID (CfdiRelacionado).
    pub uuid: &'a str,
    /// Indices of `request.lines` that are the sale's (all of them for an ingreso; the sale's
    /// concepto in a global).
    pub lines: Vec<usize>,
    /// What the sale charged (the provider's amount): the base of every proportion.
    pub sale_amount: Decimal,
    /// Refunded before this refund (and already credited).
    pub refunded_before: Decimal,
    /// The taxes the sale's earlier egresos credited, per group ([`taxes_of`] of each, added
    /// up): this egreso carries what keeps their running sum exact.
    pub credited_taxes: TaxSums,
}

/// The amount of `l` on the basis its prices are given (tax included or not), after discount.
fn line_net(l: &LineData) -> Decimal {
    l.cantidad * l.unit_price - l.discount.unwrap_or_default()
}

/// The lines' amounts at `c / total` of them, to `dec` decimals, adding up to exactly
/// `round(c / total × Σ nets)`. `c == total` gives the nets themselves.
fn shares(nets: &[Decimal], c: Decimal, total: Decimal, dec: u32) -> Vec<Decimal> {
    if c >= total {
        return nets.to_vec();
    }
    if c <= Decimal::ZERO || total <= Decimal::ZERO {
        return vec![Decimal::ZERO; nets.len()];
    }
    let whole: Decimal = nets.iter().sum();
    apportion(nets, round(whole * c / total, dec), dec)
}

/// `target` split over `weights` in proportion, to `dec` decimals, adding up to exactly
/// `target`: each rounded down, the missing units of the last decimal given to the largest
/// remainders (ties: the earlier line).
fn apportion(weights: &[Decimal], target: Decimal, dec: u32) -> Vec<Decimal> {
    let whole: Decimal = weights.iter().sum();
    if target <= Decimal::ZERO || whole <= Decimal::ZERO {
        return vec![Decimal::ZERO; weights.len()];
    }
    let unit = Decimal::new(1, dec);
    let exact: Vec<Decimal> = weights.iter().map(|w| *w * target / whole).collect();
    let mut out: Vec<Decimal> = exact
        .iter()
        .map(|e| e.round_dp_with_strategy(dec, rust_decimal::RoundingStrategy::ToZero))
        .collect();
    let mut missing = ((target - out.iter().sum::<Decimal>()) / unit)
        .round()
        .to_string()
        .parse::<i64>()
        .unwrap_or(0);
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|a, b| {
        (exact[*b] - out[*b])
            .cmp(&(exact[*a] - out[*a]))
            .then(a.cmp(b))
    });
    for i in order.iter().cycle().take(order.len() * 2) {
        if missing == 0 {
            break;
        }
        if missing > 0 {
            out[*i] += unit;
            missing -= 1;
        } else if out[*i] >= unit {
            out[*i] -= unit;
            missing += 1;
        }
    }
    out
}

/// Each line's credit between the cumulative shares `before` and `after`, adding up to exactly
/// `Σ after − Σ before`. The shares are rounded by largest remainder, which is not monotonic:
/// a line's share can be a unit smaller at a larger refunded amount (the Alabama paradox,
/// e.g. 25.37 / 19.09 / 7.31 at 0.17 then 0.18 refunded: 0.08 / 0.06 / 0.03, then 0.09 / 0.07 /
/// 0.02). No line is credited a negative amount: what it would give back is taken, a unit at a
/// time, from the largest credits (ties: the earlier line), so the egreso still totals exactly
/// the refund.
fn credits(before: &[Decimal], after: &[Decimal], unit: Decimal) -> Vec<Decimal> {
    let mut out: Vec<Decimal> = before.iter().zip(after).map(|(b, a)| *a - *b).collect();
    let mut excess: Decimal = out
        .iter()
        .filter(|c| **c < Decimal::ZERO)
        .map(|c| -*c)
        .sum();
    out.iter_mut().for_each(|c| *c = (*c).max(Decimal::ZERO));
    while excess > Decimal::ZERO {
        let Some(i) = (0..out.len()).rev().max_by_key(|i| out[*i]) else {
            break;
        };
        if out[i] <= Decimal::ZERO {
            break;
        }
        let take = unit.min(excess).min(out[i]);
        out[i] -= take;
        excess -= take;
    }
    out
}

/// What each of the original's `lines` charged (the money its share of a refund stands for),
/// from the built original: Importe − Descuento + traslados − retenciones, at full precision;
/// and the taxes of those lines per group, rounded once per group as a summary rounds them.
fn charged(req: &InvoiceRequest, lines: &[usize], dec: u32) -> Option<(Vec<Decimal>, TaxSums)> {
    let mut check = req.clone();
    check.folio = Some("1".into());
    let built = cfdi::build(&check, "00000000000000000000").ok()?;
    let conceptos = lines
        .iter()
        .map(|i| built.conceptos.get(*i))
        .collect::<Option<Vec<_>>>()?;
    let gross = conceptos
        .iter()
        .map(|c| {
            let traslados: Decimal = c.traslados.iter().filter_map(|t| t.importe).sum();
            let retenciones: Decimal = c.retenciones.iter().map(|r| r.importe).sum();
            c.importe - c.descuento.unwrap_or_default() + traslados - retenciones
        })
        .collect();
    Some((gross, taxes::sums_of(conceptos, dec)))
}

/// The taxes `req` carries per group, as its summary adds them up: what an earlier egreso
/// credited, for [`Original::credited_taxes`].
pub fn taxes_of(req: &InvoiceRequest) -> Result<TaxSums, EgresoError> {
    let dec = cfdi::catalogs::currency_decimals(&req.moneda).unwrap_or(2);
    let mut check = req.clone();
    check.folio = Some("1".into());
    let built = cfdi::build(&check, "00000000000000000000")
        .map_err(|e| EgresoError::Build(e.to_string()))?;
    Ok(taxes::sums_of(&built.conceptos, dec))
}

/// Why a refund cannot become an egreso.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgresoError {
    #[error(
        "refund of {amount} exceeds what remains refundable of the sale ({remaining} of {sale})"
    )]
    OverRefund {
        amount: Decimal,
        remaining: Decimal,
        sale: Decimal,
    },
    #[error("refund in {refund} of a sale in {sale}: an egreso is in the original's currency")]
    Currency { refund: String, sale: String },
    #[error("refund of {0} is not positive")]
    NotPositive(Decimal),
    #[error("the egreso cannot be built: {0}")]
    Build(String),
}

/// An egreso, and how far its taxes are from keeping the sale's egresos exact.
#[derive(Debug, Clone)]
pub struct Egreso {
    pub request: InvoiceRequest,
    /// Per tax group, what the sale's egresos up to this one should have credited and they do
    /// not (what should − what they do), when no amount within Anexo 20's tolerance of this
    /// egreso's Bases reaches it; empty when they add up exactly. For a refund that completes
    /// the sale, it is what the sale's egresos miss of the original's taxes for good.
    pub missed: TaxSums,
}

/// The egreso crediting `amount` of the sale described by `o`, dated `fecha`, under `serie`.
/// Receptor: the original's, with UsoCFDI G02 (público en general keeps S01); FormaPago as the
/// original; MetodoPago PUE; CfdiRelacionados 01 with the original's UUID.
pub fn egreso_request(
    o: &Original<'_>,
    amount: Decimal,
    serie: &str,
    fecha: NaiveDateTime,
) -> Result<InvoiceRequest, EgresoError> {
    egreso(o, amount, serie, fecha).map(|e| e.request)
}

/// [`egreso_request`], with what its taxes miss ([`Egreso::missed`]).
pub fn egreso(
    o: &Original<'_>,
    amount: Decimal,
    serie: &str,
    fecha: NaiveDateTime,
) -> Result<Egreso, EgresoError> {
    if amount <= Decimal::ZERO {
        return Err(EgresoError::NotPositive(amount));
    }
    let remaining = o.sale_amount - o.refunded_before;
    if amount > remaining {
        return Err(EgresoError::OverRefund {
            amount,
            remaining,
            sale: o.sale_amount,
        });
    }
    let req = o.request;
    let dec = cfdi::catalogs::currency_decimals(&req.moneda).unwrap_or(2);
    let originals: Vec<&LineData> = o.lines.iter().filter_map(|i| req.lines.get(*i)).collect();
    // What each line charged (its Base with its traslados, less its retenciones) is cut,
    // cumulatively, so the shares of a refund add up to exactly the refund; each share is then
    // split into Base and taxes on the currency's decimals (taxes::Cut), so the egreso's Total
    // is exactly the sum of its shares. Only when the sale charged what the lines charge (to
    // the document's rounding: half a unit for each of SubTotal, Descuento and every tax
    // group); otherwise the proportion is of the lines as written, with their taxes computed
    // on top, and neither Totals nor taxes are exact.
    let unit = Decimal::new(1, dec);
    let gross = charged(req, &o.lines, dec).filter(|(g, t)| {
        let rounding = unit * Decimal::from(t.len() + 2) / Decimal::TWO;
        (g.iter().sum::<Decimal>() - o.sale_amount).abs() <= rounding
    });
    let Some((gross, sale_taxes)) = gross else {
        return lines_as_written(o, &originals, amount, serie, fecha, dec);
    };
    let after_amount = o.refunded_before + amount;
    let full = apportion(&gross, o.sale_amount, dec);
    let after = apportion(&gross, after_amount, dec);
    let credits = credits(&apportion(&gross, o.refunded_before, dec), &after, unit);
    // Each group's cumulative credit after this refund: the sale's tax less the rest's share,
    // rounded, so a refund of the rest is due its own rounded share (always within tolerance
    // of its Base) and the last egreso completes the sale's tax exactly. This egreso carries
    // that less what the earlier ones credited: a centavo an earlier egreso could not carry
    // is carried here.
    let targets: TaxSums = sale_taxes
        .iter()
        .map(|(g, t)| {
            let weigh = |shares: &[Decimal]| -> Decimal {
                originals
                    .iter()
                    .zip(shares)
                    .map(|(l, s)| *s * taxes::weight(l, g))
                    .sum()
            };
            let whole = weigh(&full);
            let rest: Vec<Decimal> = full.iter().zip(&after).map(|(f, a)| *f - *a).collect();
            let cumulative = if whole.is_zero() || after_amount >= o.sale_amount {
                *t
            } else {
                *t - round(*t * weigh(&rest) / whole, dec)
            };
            let before = o.credited_taxes.get(g).copied().unwrap_or_default();
            (g.clone(), cumulative - before)
        })
        .collect();
    let mut cuts = Vec::new();
    let mut kept = Vec::new();
    for (l, c) in originals
        .iter()
        .zip(&credits)
        .filter(|(_, c)| **c > Decimal::ZERO)
    {
        let cut = taxes::Cut::new(l, *c, dec).ok_or_else(|| {
            EgresoError::Build("a line's retenciones leave nothing to charge".into())
        })?;
        cuts.push(cut);
        kept.push(*l);
    }
    let missed = taxes::settle(&mut cuts, &targets, dec);
    let lines = kept.iter().zip(&cuts).map(|(l, c)| c.line(l)).collect();
    Ok(Egreso {
        request: egreso_of(o, lines, amount, false, serie, fecha)?,
        missed,
    })
}

/// The egreso of a sale whose lines do not add up to what it charged: each line's share is
/// of its amount as written (`shares`), and the engine computes the taxes on top.
fn lines_as_written(
    o: &Original<'_>,
    originals: &[&LineData],
    amount: Decimal,
    serie: &str,
    fecha: NaiveDateTime,
    dec: u32,
) -> Result<Egreso, EgresoError> {
    let unit = Decimal::new(1, dec);
    let nets: Vec<Decimal> = originals.iter().map(|l| line_net(l)).collect();
    let before = shares(&nets, o.refunded_before, o.sale_amount, dec);
    let after = shares(&nets, o.refunded_before + amount, o.sale_amount, dec);
    let lines = originals
        .iter()
        .zip(&credits(&before, &after, unit))
        .filter(|(_, c)| **c > Decimal::ZERO)
        .map(|(l, c)| LineData {
            cantidad: Decimal::ONE,
            unit_price: c.normalize(),
            discount: None,
            // The egreso's share is cut from the document, not charged by a tax engine.
            tax_amount: None,
            ..(*l).clone()
        })
        .collect();
    let request = egreso_of(o, lines, amount, o.request.prices_include_tax, serie, fecha)?;
    Ok(Egreso {
        request,
        missed: TaxSums::new(),
    })
}

/// The egreso of `lines` for the sale of `o`, checked by building it.
fn egreso_of(
    o: &Original<'_>,
    lines: Vec<LineData>,
    amount: Decimal,
    prices_include_tax: bool,
    serie: &str,
    fecha: NaiveDateTime,
) -> Result<InvoiceRequest, EgresoError> {
    if lines.is_empty() {
        return Err(EgresoError::Build(format!(
            "a refund of {amount} is less than one centavo of any line"
        )));
    }
    let req = o.request;
    let receptor = req.receptor.with_uso(USO_CFDI_EGRESO);
    let request = InvoiceRequest {
        tipo: TipoComprobante::Egreso,
        serie: Some(serie.to_owned()),
        folio: None,
        fecha,
        moneda: req.moneda.clone(),
        tipo_cambio: req.tipo_cambio,
        forma_pago: req.forma_pago.clone(),
        metodo_pago: "PUE".into(),
        condiciones_de_pago: None,
        exportacion: req.exportacion.clone(),
        prices_include_tax,
        emisor: req.emisor.clone(),
        receptor,
        // To público en general (a global's sale) the SAT asks for InformacionGlobal: the
        // global's own (Apéndice 2 of the Guía de llenado, egreso aplicable a un CFDI global).
        informacion_global: req.informacion_global.clone(),
        relacionados: vec![RelacionadosData {
            tipo_relacion: TIPO_RELACION_NOTA_DE_CREDITO.into(),
            uuids: vec![o.uuid.to_owned()],
        }],
        lines,
        pago: None,
    };
    let mut check = request.clone();
    check.folio = Some("1".into());
    cfdi::build(&check, "00000000000000000000").map_err(|e| EgresoError::Build(e.to_string()))?;
    Ok(request)
}

/// Decides what each refund becomes, per `[refunds]` (`crate::store::Db::record_refunds` asks it
/// inside the refund's transaction, with what it read of the sale).
#[derive(Debug, Clone)]
pub struct Planner {
    serie: String,
    full: FullRefund,
}

fn dec(text: &str) -> Option<Decimal> {
    text.parse().ok()
}

impl Planner {
    pub fn new(s: &crate::config::Settings) -> Self {
        Self {
            serie: s.refunds.serie.clone(),
            full: s.refunds.full,
        }
    }

    /// The rows one refund of `facts` is recorded as.
    pub fn new_refund(facts: &RefundFacts, event_id: &str) -> NewRefund {
        NewRefund {
            provider: facts.provider.to_owned(),
            refund_id: facts.refund_id.clone(),
            payment_ref: facts.payment_ref.clone(),
            amount: facts.amount.to_string(),
            currency: facts.currency.clone(),
            refunded_at: facts.refunded_at,
            event_id: event_id.to_owned(),
        }
    }

    /// What the refund in `v` becomes, dated `now`.
    pub fn decide(&self, v: &RefundSale, now: DateTime<Utc>) -> RefundDecision {
        let r = &v.refund;
        let Some(sale) = &v.sale else {
            return RefundDecision::Wait(format!(
                "the sale {} {} is not recorded yet: credited once it is invoiced",
                r.provider, r.payment_ref
            ));
        };
        let (Some(amount), Some(sale_amount)) = (dec(&r.amount), dec(&sale.amount)) else {
            return RefundDecision::Attention(format!(
                "refund amount {:?} or sale amount {:?} is not a decimal",
                r.amount, sale.amount
            ));
        };
        if r.currency != sale.currency {
            return RefundDecision::Attention(
                EgresoError::Currency {
                    refund: r.currency.clone(),
                    sale: sale.currency.clone(),
                }
                .to_string(),
            );
        }
        let before: Decimal = v.refunded_before.iter().filter_map(|a| dec(a)).sum();
        if before + amount > sale_amount {
            return RefundDecision::Attention(
                EgresoError::OverRefund {
                    amount,
                    remaining: sale_amount - before,
                    sale: sale_amount,
                }
                .to_string(),
            );
        }
        if matches!(
            sale.status,
            PaymentStatus::ArcaPending | PaymentStatus::ArcaAuthorized
        ) {
            // Argentina: ARCA's nota de crédito, issued by `crate::arca::drain` once the
            // sale's voucher is authorized.
            return RefundDecision::Arca(format!(
                "a nota de crédito from ARCA for {amount} of {sale_amount}, once the sale's \
                 voucher is authorized"
            ));
        }
        let (credited, what) = match (&v.ingreso, &v.global) {
            (Some(i), _) => (i, "its ingreso"),
            (None, Some(g)) => (g, "its factura global"),
            (None, None) if sale.status == PaymentStatus::AwaitingGlobal => {
                return RefundDecision::GlobalReduced(format!(
                    "the sale waits for the factura global: it will carry {} instead of {sale_amount}",
                    sale_amount - before - amount
                ));
            }
            (None, None) => {
                return RefundDecision::Wait(format!(
                    "the sale has no invoice yet ({}): credited once it is stamped",
                    sale.status.label()
                ));
            }
        };
        let uuid = match (credited.state, credited.uuid.as_deref()) {
            (DocumentState::Stamped, Some(u)) => u,
            (state, _) => {
                return RefundDecision::Wait(format!(
                    "waiting for {what} to be stamped (it is {state})"
                ));
            }
        };
        let request: InvoiceRequest = match serde_json::from_str(&credited.request_json) {
            Ok(r) => r,
            Err(e) => {
                return RefundDecision::Attention(format!("{what}'s frozen request: {e}"));
            }
        };
        let fecha = crate::ingest::fecha_of(now);
        if let Some(ingreso) = &v.ingreso
            && self.full == FullRefund::Cancel
            && !v.cancel_refused
            && before.is_zero()
            && amount == sale_amount
        {
            // Motivo 02 within the month of the sale: the income never happened, in the same
            // monthly return (docs/refunds.md). Later, the month is declared: an egreso.
            if request.fecha.format("%Y-%m").to_string() == fecha.format("%Y-%m").to_string() {
                return RefundDecision::Cancel {
                    ingreso: ingreso.outbox_id,
                    reason: format!(
                        "refunded in full within the month of the sale: its ingreso {uuid} is \
                         cancelled (motivo 02) instead of credited"
                    ),
                };
            }
        }
        let lines: Vec<usize> = if v.ingreso.is_some() {
            (0..request.lines.len()).collect()
        } else {
            // The sale's concepto in the global carries its payment id (docs/global.md).
            (0..request.lines.len())
                .filter(|i| {
                    request.lines[*i].no_identificacion.as_deref() == Some(r.payment_ref.as_str())
                })
                .collect()
        };
        if lines.is_empty() {
            return RefundDecision::Attention(format!(
                "{what} has no concepto for the sale {}",
                r.payment_ref
            ));
        }
        let mut credited_taxes = TaxSums::new();
        for json in &v.earlier_egresos {
            let taxes = serde_json::from_str::<InvoiceRequest>(json)
                .map_err(|e| e.to_string())
                .and_then(|e| taxes_of(&e).map_err(|e| e.to_string()));
            match taxes {
                Ok(t) => t
                    .into_iter()
                    .for_each(|(g, a)| *credited_taxes.entry(g).or_default() += a),
                Err(e) => {
                    return RefundDecision::Attention(format!(
                        "an earlier egreso of the sale: {e}"
                    ));
                }
            }
        }
        // A global carries the sale less what was refunded before it was frozen: its egresos
        // are measured against that concepto, not against the sale.
        let reduced: Decimal = match v.ingreso {
            Some(_) => Decimal::ZERO,
            None => v.reduced_in_global.iter().filter_map(|a| dec(a)).sum(),
        };
        let original = Original {
            request: &request,
            uuid,
            lines,
            sale_amount: sale_amount - reduced,
            refunded_before: before - reduced,
            credited_taxes,
        };
        let Egreso { request, missed } = match egreso(&original, amount, &self.serie, fecha) {
            Ok(e) => e,
            Err(e) => return RefundDecision::Attention(e.to_string()),
        };
        // The last egreso of the sale could not complete its taxes within tolerance: said
        // where the merchant reads the refund (docs/refunds.md, "What is exact").
        let missed = if before + amount == sale_amount && !missed.is_empty() {
            let off: Vec<String> = missed.iter().map(|(g, d)| format!("{g} {d}")).collect();
            format!(
                "; its taxes differ from the original's by {} (out of tolerance)",
                off.join(", ")
            )
        } else {
            String::new()
        };
        let kind = DocumentKind::Egreso;
        let purpose = format!("{}:{}", kind.as_str(), r.refund_id);
        RefundDecision::Egreso {
            payment: Box::new(NewPayment {
                provider: REFUND_PROVIDER.into(),
                payment_id: format!("{}:{}", r.provider, r.refund_id),
                event_id: r.event_id.clone(),
                amount: r.amount.clone(),
                currency: r.currency.clone(),
                method: REFUND_PROVIDER.into(),
                forma_pago: Some(request.forma_pago.clone()),
                customer_json: "{}".into(),
                paid_at: r.refunded_at,
                livemode: sale.livemode,
                status: PaymentStatus::InvoicePending,
                reason: Some(format!(
                    "refund {} of {} {} ({amount} of {sale_amount}){missed}",
                    r.refund_id, r.provider, r.payment_ref
                )),
                references: Vec::new(),
                lines_json: None,
                tipo_cambio: None,
                arca: None,
            }),
            draft: Box::new(OutboxDraft {
                kind,
                stamp_key: StampKey::derive(&r.provider, &r.payment_ref, &purpose),
                request,
                state: DocumentState::Pending,
                error_code: None,
                error_message: None,
                test_mode: !sale.livemode,
            }),
        }
    }
}

#[cfg(test)]
mod tests;
