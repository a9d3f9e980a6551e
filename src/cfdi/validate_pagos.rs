//! What a PAC verifies of a tipo P (Pagos 2.0) beyond the XSD, on the parsed XML: the
//! comprobante's fixed values, the saldo arithmetic, the payment against its documents, the
//! taxes in proportion and the Totales. Part of [`super::validate::check_amounts`], so the
//! engine refuses before sealing and the sandbox PAC rejects what a PAC would.
//!
//! The codes follow the SAT's matriz de validaciones of the complemento para recepción de pagos
//! (`CRP…`) as far as this project knows them; the message always says what is wrong.

use std::collections::BTreeMap;

use rust_decimal::Decimal;

use super::dom::{Element, NS_CFDI, NS_PAGOS20};
use super::money::{self, decimals_of, parse_amount, round, unit};
use super::pagos::{CLAVE_PROD_SERV_PAGO, CLAVE_UNIDAD_PAGO, USO_CFDI_PAGOS};
use super::validate::Problem;

/// Problems of a parsed tipo P, as a PAC reports them.
struct Checker(Vec<Problem>);

impl Checker {
    fn fail(&mut self, code: &'static str, msg: impl Into<String>) {
        self.0.push(Problem::new(Some(code), msg));
    }
    /// An amount attribute; a malformed one is a problem (no SAT code: the XSD refuses it).
    fn amount(&mut self, e: &Element, attr: &str) -> Option<Decimal> {
        let v = e.attr(attr)?;
        let d = parse_amount(v).filter(|d| money::in_range(*d));
        if d.is_none() {
            self.0.push(Problem::new(
                None,
                format!("{}@{attr}=\"{v}\" is not an amount", e.name),
            ));
        }
        d
    }
    fn required(&mut self, e: &Element, attr: &str) -> Option<Decimal> {
        if e.attr(attr).is_none() {
            self.0
                .push(Problem::new(None, format!("{}@{attr} is missing", e.name)));
        }
        self.amount(e, attr)
    }
}

/// Whether `got`, written with the decimals of `text`, is `want` within that rounding unit.
fn near(got: Decimal, text: &str, want: Decimal) -> bool {
    (got - want).abs() <= unit(decimals_of(text))
}

/// What a PAC checks of a tipo P beyond the XSD: the comprobante's fixed values, the saldo
/// arithmetic, the payment against the documents, the taxes and the Totales.
pub fn check(root: &Element) -> Vec<Problem> {
    let mut k = Checker(Vec::new());
    for (attr, code, want) in [("SubTotal", "CRP101", "0"), ("Total", "CRP108", "0")] {
        if root.attr(attr) != Some(want) {
            k.fail(code, format!("{attr} of a pago must be \"0\""));
        }
    }
    if root.attr("Moneda") != Some("XXX") {
        k.fail("CRP102", "Moneda of a pago must be XXX");
    }
    for (attr, code) in [
        ("FormaPago", "CRP103"),
        ("MetodoPago", "CRP104"),
        ("CondicionesDePago", "CRP105"),
        ("Descuento", "CRP106"),
        ("TipoCambio", "CRP107"),
    ] {
        if root.attr(attr).is_some() {
            k.fail(code, format!("a pago must not have {attr}"));
        }
    }
    if root.child(NS_CFDI, "Impuestos").is_some() {
        k.fail("CRP110", "a pago must not have cfdi:Impuestos");
    }
    let conceptos = root.path(NS_CFDI, &["Conceptos", "Concepto"]);
    let fixed_concept = |c: &&Element| {
        c.attr("ClaveProdServ") == Some(CLAVE_PROD_SERV_PAGO)
            && c.attr("ClaveUnidad") == Some(CLAVE_UNIDAD_PAGO)
            && c.attr("Cantidad") == Some("1")
            && c.attr("Descripcion") == Some("Pago")
            && c.attr("ValorUnitario") == Some("0")
            && c.attr("Importe") == Some("0")
            && c.attr("ObjetoImp") == Some("01")
            && c.elements().next().is_none()
    };
    if conceptos.len() != 1 || !conceptos.iter().all(fixed_concept) {
        k.fail(
            "CRP109",
            "a pago has one Concepto: 84111506, Cantidad 1, ACT, Pago, ValorUnitario 0, Importe 0, ObjetoImp 01",
        );
    }
    if root.child_attr(NS_CFDI, "Receptor", "UsoCFDI") != Some(USO_CFDI_PAGOS) {
        k.fail("CRP113", "the UsoCFDI of a pago must be CP01");
    }
    let pagos: Vec<&Element> = root
        .children_named(NS_CFDI, "Complemento")
        .flat_map(|c| c.children_named(NS_PAGOS20, "Pagos"))
        .collect();
    let [pagos] = pagos.as_slice() else {
        k.fail(
            "CRP999",
            "a pago must carry exactly one pago20:Pagos complemento",
        );
        return k.0;
    };
    check_pagos(&mut k, pagos);
    k.0
}

/// (Impuesto, TipoFactor, TasaOCuota as written).
type Key = (String, String, Option<String>);

fn key(e: &Element, suffix: &str) -> Key {
    let a = |n: &str| {
        e.attr(&format!("{n}{suffix}"))
            .unwrap_or_default()
            .to_owned()
    };
    (
        a("Impuesto"),
        a("TipoFactor"),
        e.attr(&format!("TasaOCuota{suffix}"))
            .and_then(parse_amount)
            .map(|d| d.normalize().to_string()),
    )
}

fn check_pagos(k: &mut Checker, pagos: &Element) {
    let ns = NS_PAGOS20;
    let mut monto_total = Decimal::ZERO;
    // Per (impuesto, factor, tasa): the MXN sums of BaseP and ImporteP.
    let mut in_mxn: BTreeMap<Key, (Decimal, Decimal)> = BTreeMap::new();
    for pago in pagos.children_named(ns, "Pago") {
        let moneda = pago.attr("MonedaP").unwrap_or_default();
        let tc = match (moneda, pago.attr("TipoCambioP")) {
            ("XXX", _) => {
                k.fail("CRP202", "MonedaP must not be XXX");
                continue;
            }
            ("MXN", Some("1") | None) => Decimal::ONE,
            ("MXN", Some(t)) => {
                k.fail("CRP204", format!("TipoCambioP must be 1 for MXN, not {t}"));
                continue;
            }
            (m, None) => {
                k.fail("CRP203", format!("TipoCambioP is required for MonedaP {m}"));
                continue;
            }
            (_, Some(_)) => k.amount(pago, "TipoCambioP").unwrap_or(Decimal::ONE),
        };
        if pago.attr("FormaDePagoP") == Some("99") {
            k.fail("CRP201", "FormaDePagoP must not be 99 (Por definir)");
        }
        let Some(monto) = k.required(pago, "Monto") else {
            continue;
        };
        if monto <= Decimal::ZERO {
            k.fail("CRP207", "Monto must be greater than 0");
        }
        monto_total += monto * tc;
        let mut pagado_p = Decimal::ZERO;
        let mut dr_sums: BTreeMap<Key, (Decimal, Decimal)> = BTreeMap::new();
        for d in pago.children_named(ns, "DoctoRelacionado") {
            let moneda_dr = d.attr("MonedaDR").unwrap_or_default();
            let eq = match (moneda_dr == moneda, d.attr("EquivalenciaDR")) {
                (true, Some("1")) => Decimal::ONE,
                (true, _) => {
                    k.fail(
                        "CRP217",
                        "EquivalenciaDR must be 1 when MonedaDR is MonedaP",
                    );
                    Decimal::ONE
                }
                (false, None) => {
                    k.fail(
                        "CRP217",
                        "EquivalenciaDR is required when MonedaDR differs from MonedaP",
                    );
                    continue;
                }
                (false, Some(_)) => match k.amount(d, "EquivalenciaDR") {
                    Some(e) if e > Decimal::ZERO => e,
                    _ => continue,
                },
            };
            let (Some(ant), Some(paid), Some(ins)) = (
                k.required(d, "ImpSaldoAnt"),
                k.required(d, "ImpPagado"),
                k.required(d, "ImpSaldoInsoluto"),
            ) else {
                continue;
            };
            if ant <= Decimal::ZERO {
                k.fail("CRP221", "ImpSaldoAnt must be greater than 0");
            }
            if paid <= Decimal::ZERO {
                k.fail("CRP222", "ImpPagado must be greater than 0");
            }
            if ins < Decimal::ZERO || ins != ant - paid {
                k.fail(
                    "CRP224",
                    format!("ImpSaldoInsoluto {ins} must be ImpSaldoAnt {ant} − ImpPagado {paid} and not negative"),
                );
            }
            pagado_p += paid / eq;
            let traslados = d.path(ns, &["ImpuestosDR", "TrasladosDR", "TrasladoDR"]);
            match d.attr("ObjetoImpDR") {
                Some("02") if traslados.is_empty() => {
                    k.fail("CRP2302", "ObjetoImpDR 02 requires ImpuestosDR");
                }
                Some("01") if d.child(ns, "ImpuestosDR").is_some() => {
                    k.fail("CRP2301", "ObjetoImpDR 01 must not carry ImpuestosDR");
                }
                _ => {}
            }
            for t in traslados {
                let base = k.required(t, "BaseDR").unwrap_or_default();
                let imp = k.amount(t, "ImporteDR");
                if let (Some(rate), Some(imp)) = (k.amount(t, "TasaOCuotaDR"), imp)
                    && !near(imp, t.attr("ImporteDR").unwrap_or_default(), base * rate)
                {
                    k.fail(
                        "CRP20271",
                        format!("ImporteDR {imp} is not BaseDR {base} × TasaOCuotaDR {rate}"),
                    );
                }
                let e = dr_sums.entry(key(t, "DR")).or_default();
                e.0 += base / eq;
                e.1 += imp.unwrap_or_default() / eq;
            }
        }
        if pagado_p > monto + unit(decimals_of(pago.attr("Monto").unwrap_or_default())) {
            k.fail(
                "CRP206",
                format!("the documents' ImpPagado ({pagado_p} in MonedaP) exceed Monto {monto}"),
            );
        }
        let mut seen = Vec::new();
        for t in pago.path(ns, &["ImpuestosP", "TrasladosP", "TrasladoP"]) {
            let kk = key(t, "P");
            let (b, i) = dr_sums.get(&kk).copied().unwrap_or_default();
            let base = k.required(t, "BaseP").unwrap_or_default();
            let imp = k.amount(t, "ImporteP");
            if !near(base, t.attr("BaseP").unwrap_or_default(), b)
                || imp.is_some_and(|imp| !near(imp, t.attr("ImporteP").unwrap_or_default(), i))
            {
                k.fail(
                    "CRP20284",
                    format!("TrasladoP {kk:?}: BaseP/ImporteP are not the sum of the documents' ({b}, {i})"),
                );
            }
            let e = in_mxn.entry(kk.clone()).or_default();
            e.0 += base * tc;
            e.1 += imp.unwrap_or_default() * tc;
            seen.push(kk);
        }
        if dr_sums.keys().any(|kk| !seen.contains(kk)) {
            k.fail(
                "CRP20284",
                "a traslado of the documents is missing from ImpuestosP",
            );
        }
    }
    let Some(t) = pagos.child(ns, "Totales") else {
        k.fail("CRP20999", "pago20:Totales is missing");
        return;
    };
    let want = |f: &str, r: Option<&str>, base: bool| {
        let kk = ("002".to_owned(), f.to_owned(), r.map(str::to_owned));
        in_mxn
            .get(&kk)
            .map(|(b, i)| round(if base { *b } else { *i }, 2))
    };
    for (attr, f, rate, base) in [
        ("TotalTrasladosBaseIVA16", "Tasa", Some("0.16"), true),
        ("TotalTrasladosImpuestoIVA16", "Tasa", Some("0.16"), false),
        ("TotalTrasladosBaseIVA8", "Tasa", Some("0.08"), true),
        ("TotalTrasladosImpuestoIVA8", "Tasa", Some("0.08"), false),
        ("TotalTrasladosBaseIVA0", "Tasa", Some("0"), true),
        ("TotalTrasladosImpuestoIVA0", "Tasa", Some("0"), false),
        ("TotalTrasladosBaseIVAExento", "Exento", None, true),
    ] {
        let got = k.amount(t, attr);
        let expected = want(f, rate, base);
        let ok = match (got, expected) {
            (Some(g), Some(e)) => near(g, t.attr(attr).unwrap_or_default(), e),
            (None, None) => true,
            _ => false,
        };
        if !ok {
            k.fail(
                "CRP20290",
                format!("Totales@{attr} is {got:?}, the pagos' traslados give {expected:?}"),
            );
        }
    }
    if let Some(m) = k.required(t, "MontoTotalPagos")
        && !near(
            m,
            t.attr("MontoTotalPagos").unwrap_or_default(),
            round(monto_total, 2),
        )
    {
        k.fail(
            "CRP20299",
            format!(
                "MontoTotalPagos {m} is not the sum of Monto × TipoCambioP, {}",
                round(monto_total, 2)
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The codes `check` gives the first pago sample after `edit` (on its unsealed XML).
    fn codes(edit: impl Fn(String) -> String) -> Vec<&'static str> {
        let json = include_str!("../../fixtures/requests/13-pago-parcialidad-1.json");
        let req: crate::cfdi::InvoiceRequest = serde_json::from_str(json).expect("request");
        let c = crate::cfdi::build(&req, "30001000000500003416").expect("builds");
        let xml = edit(String::from_utf8(crate::cfdi::xml::to_xml(&c)).expect("utf-8"));
        let root = Element::parse(xml.as_bytes()).expect("parses");
        check(&root).into_iter().filter_map(|p| p.code).collect()
    }

    #[test]
    fn a_well_formed_pago_passes_and_each_broken_rule_is_named() {
        assert_eq!(codes(|x| x), Vec::<&str>::new());
        let cases: [(&str, &str, &str); 6] = [
            (
                "ImpSaldoInsoluto=\"660.00\"",
                "ImpSaldoInsoluto=\"600.00\"",
                "CRP224",
            ),
            (
                "MontoTotalPagos=\"500.00\"",
                "MontoTotalPagos=\"501.00\"",
                "CRP20299",
            ),
            ("Monto=\"500.00\"", "Monto=\"400.00\"", "CRP206"),
            ("SubTotal=\"0\"", "SubTotal=\"1\"", "CRP101"),
            ("UsoCFDI=\"CP01\"", "UsoCFDI=\"G03\"", "CRP113"),
            ("FormaDePagoP=\"03\"", "FormaDePagoP=\"99\"", "CRP201"),
        ];
        for (from, to, code) in cases {
            let got = codes(|x| {
                assert!(x.contains(from), "{from}");
                x.replacen(from, to, 1)
            });
            assert!(got.contains(&code), "{from} → {to}: {got:?}");
        }
    }
}
