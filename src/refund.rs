//! A refund (or a lost dispute) → the CFDI de egreso that credits it, without I/O.
//!
//! The egreso is cut out of the original document (the sale's frozen ingreso, or its concepto in
//! the factura global) in proportion to the money given back. Proportions are taken
//! *cumulatively*: a sale of amount `A` already refunded `b` and refunded `a` more gets, for each
//! line, `share(b + a) − share(b)`, where `share(c)` is the line's amount scaled by `c / A` to the
//! centavo, the centavos split over the lines by largest remainder so the lines of `share(c)` add
//! up to exactly `c / A` of the lines' total. So the egresos of a sale refunded in any number of
//! steps add up, line by line and to the centavo, to what the original charged, and the last one
//! (the rest) is exactly the original minus what earlier egresos credited. Document totals are
//! rounded once per document (Anexo 20), so they may differ by that rounding (docs/refunds.md).

use chrono::{DateTime, NaiveDateTime, Utc};
use rust_decimal::Decimal;

use crate::cfdi::money::round;
use crate::cfdi::{self, InvoiceRequest, LineData, RelacionadosData, TipoComprobante};
use crate::config::FullRefund;
use crate::domain::{DocumentKind, DocumentState, StampKey};
use crate::store::{NewPayment, NewRefund, OutboxDraft, RefundDecision, RefundSale};

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

/// What each of the original's `lines` charged with its traslados (the money its share of a
/// refund stands for), from the built original: Importe − Descuento + traslados, at full
/// precision. `None` when a line has retenciones (its charge is not base + traslados).
fn charged_with_tax(req: &InvoiceRequest, lines: &[usize]) -> Option<Vec<Decimal>> {
    let mut check = req.clone();
    check.folio = Some("1".into());
    let built = cfdi::build(&check, "00000000000000000000").ok()?;
    lines
        .iter()
        .map(|i| {
            let c = built.conceptos.get(*i)?;
            if !c.retenciones.is_empty() {
                return None;
            }
            let taxes: Decimal = c.traslados.iter().filter_map(|t| t.importe).sum();
            Some(c.importe - c.descuento.unwrap_or_default() + taxes)
        })
        .collect()
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

/// The egreso crediting `amount` of the sale described by `o`, dated `fecha`, under `serie`.
/// Receptor: the original's, with UsoCFDI G02 (público en general keeps S01); FormaPago as the
/// original; MetodoPago PUE; CfdiRelacionados 01 with the original's UUID.
pub fn egreso_request(
    o: &Original<'_>,
    amount: Decimal,
    serie: &str,
    fecha: NaiveDateTime,
) -> Result<InvoiceRequest, EgresoError> {
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
    // Tax-excluded prices: each line's price *with* its taxes is cut, cumulatively, so the
    // shares of a refund add up to exactly the refund, and the egreso is written with
    // tax-included prices, whose Total the engine fits to what they charge (cfdi::build). Cut
    // from the prices without tax, the egreso's taxes are computed on top and each document
    // rounds them once: its Total drifts up to a centavo from the refund. A line's tax cannot be
    // cut on its own instead: the SAT checks it against the line's Base (CFDI40167), and a
    // cumulative cut of both to whole centavos falls outside that tolerance for some refunds.
    // Only when the sale charged what the lines charge with their taxes (to the document's
    // rounding); otherwise the proportion is of the lines as written.
    let unit = Decimal::new(1, dec);
    let gross = (!req.prices_include_tax)
        .then(|| charged_with_tax(req, &o.lines))
        .flatten()
        .filter(|g| (g.iter().sum::<Decimal>() - o.sale_amount).abs() <= unit);
    let (before, after) = match &gross {
        Some(g) => (
            apportion(g, o.refunded_before, dec),
            apportion(g, o.refunded_before + amount, dec),
        ),
        None => {
            let nets: Vec<Decimal> = originals.iter().map(|l| line_net(l)).collect();
            (
                shares(&nets, o.refunded_before, o.sale_amount, dec),
                shares(&nets, o.refunded_before + amount, o.sale_amount, dec),
            )
        }
    };
    let credits = credits(&before, &after, unit);
    let lines: Vec<LineData> = originals
        .iter()
        .zip(&credits)
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
    if lines.is_empty() {
        return Err(EgresoError::Build(format!(
            "a refund of {amount} is less than one centavo of any line"
        )));
    }
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
        prices_include_tax: req.prices_include_tax || gross.is_some(),
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
        if matches!(sale.status.as_str(), "arca_pending" | "arca_authorized") {
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
            (None, None) if sale.status == "awaiting_global" => {
                return RefundDecision::GlobalReduced(format!(
                    "the sale waits for the factura global: it will carry {} instead of {sale_amount}",
                    sale_amount - before - amount
                ));
            }
            (None, None) => {
                return RefundDecision::Wait(format!(
                    "the sale has no invoice yet ({}): credited once it is stamped",
                    sale.status
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
        let original = Original {
            request: &request,
            uuid,
            lines,
            sale_amount,
            refunded_before: before,
        };
        let request = match egreso_request(&original, amount, &self.serie, fecha) {
            Ok(req) => req,
            Err(e) => return RefundDecision::Attention(e.to_string()),
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
                status: "invoice_pending".into(),
                reason: Some(format!(
                    "refund {} of {} {} ({amount} of {sale_amount})",
                    r.refund_id, r.provider, r.payment_ref
                )),
                references: Vec::new(),
                lines_json: None,
                tipo_cambio: None,
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
mod tests {
    use super::*;
    use crate::cfdi::TaxTreatment;

    fn sale(lines: &[(i64, i64)]) -> InvoiceRequest {
        let json = crate::sandbox::SAMPLE_REQUESTS
            .iter()
            .find(|(n, _)| *n == "01-iva16-mxn")
            .map(|(_, j)| *j)
            .expect("sample");
        let mut r: InvoiceRequest = serde_json::from_str(json).expect("request");
        r.lines = lines
            .iter()
            .map(|(price, disc)| LineData {
                unit_price: Decimal::new(*price, 2),
                discount: (*disc > 0).then(|| Decimal::new(*disc, 2)),
                ..r.lines[0].clone()
            })
            .collect();
        r
    }

    fn total(r: &InvoiceRequest) -> Decimal {
        let mut r = r.clone();
        r.folio = Some("1".into());
        cfdi::build(&r, "00000000000000000000")
            .expect("build")
            .total
    }

    /// Consecutive centavos where largest remainder takes a unit back from a line: the egreso
    /// of the second still credits exactly the refund, and no line negatively.
    #[test]
    fn a_refund_where_a_lines_share_shrinks_still_credits_exactly_the_refund() {
        let mut req = sale(&[(2537, 0), (1909, 0), (731, 0)]);
        for l in &mut req.lines {
            l.tax = TaxTreatment::NoObjeto;
        }
        let unit = Decimal::new(1, 2);
        let nets: Vec<Decimal> = req.lines.iter().map(line_net).collect();
        let sale_amount: Decimal = nets.iter().sum();
        let (b, a) = (Decimal::new(17, 2), Decimal::new(18, 2));
        let (before, after) = (apportion(&nets, b, 2), apportion(&nets, a, 2));
        assert!(
            after[2] < before[2],
            "{before:?} → {after:?}: the case is gone"
        );
        let got = credits(&before, &after, unit);
        assert!(got.iter().all(|c| *c >= Decimal::ZERO), "{got:?}");
        assert_eq!(got.iter().sum::<Decimal>(), unit);
        let o = Original {
            request: &req,
            uuid: "6F2C1B9E-8F4A-4E3B-9D8A-2B1C3D4E5F60",
            lines: vec![0, 1, 2],
            sale_amount,
            refunded_before: b,
        };
        let e = egreso_request(&o, unit, "NC", req.fecha).expect("egreso");
        assert_eq!(total(&e), unit);
    }

    #[test]
    fn shares_add_up_to_the_centavo_and_telescope() {
        let nets = [
            Decimal::new(3333, 2),
            Decimal::new(3333, 2),
            Decimal::new(3334, 2),
        ];
        let t = Decimal::new(10000, 2);
        let s = shares(&nets, Decimal::new(1, 2), t, 2);
        assert_eq!(s.iter().sum::<Decimal>(), Decimal::new(1, 2));
        assert_eq!(shares(&nets, t, t, 2), nets.to_vec());
    }

    #[test]
    fn a_partial_refund_then_the_rest_credit_exactly_the_sale() {
        let req = sale(&[(11600, 0), (5000, 1000)]);
        // Tax-excluded: 116.00 + 40.00 with IVA 16 %.
        let amount = total(&req);
        assert_eq!(amount, Decimal::new(18096, 2));
        let mut o = Original {
            request: &req,
            uuid: "6F2C1B9E-8F4A-4E3B-9D8A-2B1C3D4E5F60",
            lines: vec![0, 1],
            sale_amount: amount,
            refunded_before: Decimal::ZERO,
        };
        let fecha = req.fecha;
        let first = egreso_request(&o, Decimal::new(7777, 2), "NC", fecha).expect("first");
        o.refunded_before = Decimal::new(7777, 2);
        let rest = egreso_request(&o, amount - Decimal::new(7777, 2), "NC", fecha).expect("rest");
        assert_eq!(first.tipo, TipoComprobante::Egreso);
        assert_eq!(first.metodo_pago, "PUE");
        assert_eq!(first.relacionados[0].tipo_relacion, "01");
        // Each line is credited what it charged with its IVA, and each egreso exactly its refund.
        for (i, charged) in [Decimal::new(13456, 2), Decimal::new(4640, 2)]
            .into_iter()
            .enumerate()
        {
            let credited = first.lines[i].unit_price + rest.lines[i].unit_price;
            assert_eq!(credited, charged, "line {i}");
        }
        assert_eq!(total(&first), Decimal::new(7777, 2));
        assert_eq!(total(&first) + total(&rest), total(&req));
        o.refunded_before = amount - Decimal::ONE;
        assert!(matches!(
            egreso_request(&o, Decimal::TWO, "NC", fecha),
            Err(EgresoError::OverRefund { .. })
        ));
        assert_eq!(req.lines[0].tax, TaxTreatment::Iva16);
    }

    fn sample(name: &str) -> InvoiceRequest {
        let json = crate::sandbox::SAMPLE_REQUESTS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, j)| *j)
            .expect("sample");
        serde_json::from_str(json).expect("request")
    }

    /// The `cfdi sample` egresos are what this module cuts out of the samples they credit: a
    /// partial refund of 02 (four lines with discounts) and a refund of one sale of the
    /// global 06 to público en general.
    #[test]
    fn the_egreso_samples_are_what_the_engine_issues() {
        let uuid = "5FB2822E-396D-4725-8521-CDC4BDD20CCF";
        let cases = [
            (
                "02-lines-with-discount",
                "09-egreso-reembolso-parcial",
                None,
                "7000.00",
            ),
            (
                "06-factura-global",
                "10-egreso-publico-en-general",
                Some("pi_3Q0002"),
                "20.00",
            ),
        ];
        for (from, sample_name, concepto, refund) in cases {
            let original = sample(from);
            let want = sample(sample_name);
            let lines: Vec<usize> = (0..original.lines.len())
                .filter(|i| {
                    concepto.is_none()
                        || original.lines[*i].no_identificacion.as_deref() == concepto
                })
                .collect();
            let mut check = original.clone();
            check.folio = Some("1".into());
            let built = cfdi::build(&check, "00000000000000000000").expect("original");
            let sale_amount = match concepto {
                Some(_) => lines.iter().map(|i| line_net(&original.lines[*i])).sum(),
                None => built.total,
            };
            let o = Original {
                request: &original,
                uuid,
                lines,
                sale_amount,
                refunded_before: Decimal::ZERO,
            };
            let mut got = egreso_request(&o, refund.parse().expect("amount"), "NC", want.fecha)
                .expect("egreso");
            got.folio.clone_from(&want.folio);
            if std::env::var_os("PRINT_EGRESO_SAMPLES").is_some() {
                println!("{}", serde_json::to_string_pretty(&got).expect("json"));
            }
            assert_eq!(got, want, "{sample_name}");
        }
    }
}
