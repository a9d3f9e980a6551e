//! The egreso cut out of a sale: exact Totals, exact taxes, the samples.

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
        credited_taxes: TaxSums::new(),
    };
    let e = egreso_request(&o, unit, "NC", req.fecha).expect("egreso");
    assert_eq!(total(&e), unit);
}

fn iva(rate: i64) -> TaxGroup {
    TaxGroup::Traslado {
        impuesto: "002".into(),
        tasa: Decimal::new(rate, 2),
    }
}

/// The sale's refunds one after the other, each egreso told what the earlier ones
/// credited: their requests.
fn refunded(req: &InvoiceRequest, refunds: &[Decimal]) -> Vec<Egreso> {
    let mut o = Original {
        request: req,
        uuid: "6F2C1B9E-8F4A-4E3B-9D8A-2B1C3D4E5F60",
        lines: (0..req.lines.len()).collect(),
        sale_amount: total(req),
        refunded_before: Decimal::ZERO,
        credited_taxes: TaxSums::new(),
    };
    let mut out = Vec::new();
    for a in refunds {
        let e = egreso(&o, *a, "NC", req.fecha).expect("egreso");
        assert_eq!(total(&e.request), *a, "an egreso's Total is its refund");
        for (g, v) in taxes_of(&e.request).expect("taxes") {
            *o.credited_taxes.entry(g).or_default() += v;
        }
        o.refunded_before += *a;
        out.push(e);
    }
    out
}

fn credited(egresos: &[Egreso]) -> TaxSums {
    let mut out = TaxSums::new();
    for e in egresos {
        for (g, v) in taxes_of(&e.request).expect("taxes") {
            *out.entry(g).or_default() += v;
        }
    }
    out
}

/// 99.99 + IVA 16.00 refunded 0.25, then the rest: each egreso rounding its own share of
/// the IVA (0.25 × 16/116 → 0.03, 115.74 × 16/116 → 15.96), as egresos did before, credits
/// 15.99. The rest carries what completes the sale's 16.00, within tolerance of its Base.
#[test]
fn a_sale_refunded_in_two_credits_exactly_its_iva() {
    let mut req = sale(&[(9999, 0)]);
    req.lines[0].cantidad = Decimal::ONE;
    let amount = total(&req);
    assert_eq!(amount, Decimal::new(11599, 2));
    let first = Decimal::new(25, 2);
    let own = |a: Decimal| round(a * Decimal::new(16, 2) / Decimal::new(116, 2), 2);
    assert_eq!(
        own(first) + own(amount - first),
        Decimal::new(1599, 2),
        "the case is gone"
    );
    let egresos = refunded(&req, &[first, amount - first]);
    assert!(egresos.iter().all(|e| e.missed.is_empty()));
    assert_eq!(credited(&egresos), taxes_of(&req).expect("sale's taxes"));
    assert_eq!(credited(&egresos)[&iva(16)], Decimal::new(1600, 2));
}

/// 115.99 with IVA included refunded 1.49, 0.14 and the rest: the second egreso's share
/// of the IVA is 0.01, but 0.01 of IVA on a Base of 0.13 is outside the tolerance (Base ×
/// 0.16 = 0.0208, at most 0.0108 away), so it carries 0.02; the rest, told what the two
/// credited, takes 15.77 where its own share would be 15.78.
#[test]
fn a_centavo_an_egreso_cannot_carry_is_carried_by_the_next() {
    let mut req = sale(&[(11599, 0)]);
    req.lines[0].cantidad = Decimal::ONE;
    req.prices_include_tax = true;
    let amount = total(&req);
    let cuts = [Decimal::new(149, 2), Decimal::new(14, 2)];
    let egresos = refunded(&req, &[cuts[0], cuts[1], amount - cuts[0] - cuts[1]]);
    let carried: Vec<Option<Decimal>> = egresos
        .iter()
        .map(|e| e.request.lines[0].tax_amount)
        .collect();
    let iva_of = |cents: i64| Some(Decimal::new(cents, 2));
    assert_eq!(carried, vec![iva_of(21), iva_of(2), iva_of(1577)]);
    assert_eq!(
        egresos[1].missed,
        TaxSums::from([(iva(16), Decimal::new(-1, 2))])
    );
    assert!(egresos[2].missed.is_empty());
    assert_eq!(credited(&egresos), taxes_of(&req).expect("sale's taxes"));
}

/// A line with IVA 16 % withholding IVA (2/3) and ISR (10 %): its egresos were cut from the
/// Base and their taxes computed on top, so the rest of a sale of 13,696.28 refunded 13.69
/// first came to 13,682.58. Each egreso now totals its refund, and together they credit
/// each traslado and retención of the sale exactly.
#[test]
fn a_sale_with_retenciones_is_credited_exactly() {
    let mut req = sale(&[(714_762, 707_614)]);
    req.lines[0].cantidad = Decimal::from(3);
    req.lines[0].retenciones = vec![
        cfdi::RetencionData {
            impuesto: "002".into(),
            tasa: Decimal::new(106_667, 6),
            importe: None,
        },
        cfdi::RetencionData {
            impuesto: "001".into(),
            tasa: Decimal::new(1, 1),
            importe: None,
        },
    ];
    let amount = total(&req);
    assert_eq!(amount, Decimal::new(1_369_628, 2));
    let first = Decimal::new(1369, 2);
    let egresos = refunded(&req, &[first, amount - first]);
    assert!(egresos.iter().all(|e| e.missed.is_empty()));
    let want = taxes_of(&req).expect("sale's taxes");
    assert_eq!(want.len(), 3, "{want:?}");
    assert_eq!(credited(&egresos), want);
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
        credited_taxes: TaxSums::new(),
    };
    let fecha = req.fecha;
    let first = egreso_request(&o, Decimal::new(7777, 2), "NC", fecha).expect("first");
    o.refunded_before = Decimal::new(7777, 2);
    o.credited_taxes = taxes_of(&first).expect("taxes");
    let rest = egreso_request(&o, amount - Decimal::new(7777, 2), "NC", fecha).expect("rest");
    assert_eq!(first.tipo, TipoComprobante::Egreso);
    assert_eq!(first.metodo_pago, "PUE");
    assert_eq!(first.relacionados[0].tipo_relacion, "01");
    // Each line is credited what it charged with its IVA, and each egreso exactly its refund.
    let line = |l: &LineData| l.unit_price + l.tax_amount.unwrap_or_default();
    for (i, charged) in [Decimal::new(13456, 2), Decimal::new(4640, 2)]
        .into_iter()
        .enumerate()
    {
        let credited = line(&first.lines[i]) + line(&rest.lines[i]);
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
                concepto.is_none() || original.lines[*i].no_identificacion.as_deref() == concepto
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
            credited_taxes: TaxSums::new(),
        };
        let mut got =
            egreso_request(&o, refund.parse().expect("amount"), "NC", want.fecha).expect("egreso");
        got.folio.clone_from(&want.folio);
        if std::env::var_os("PRINT_EGRESO_SAMPLES").is_some() {
            println!("{}", serde_json::to_string_pretty(&got).expect("json"));
        }
        assert_eq!(got, want, "{sample_name}");
    }
}
