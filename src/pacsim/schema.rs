//! What SAT's XSD checks on a CFDI 4.0 comprobante's attributes (`cfdv40.xsd` with
//! `tdCFDI.xsd` and `catCFDI.xsd`): required attributes, the `xs:pattern`, length,
//! `fractionDigits` and `minInclusive` facets, and catalog membership (the enumerations of
//! `catCFDI.xsd`, [`crate::cfdi::catalogs::in_xsd_catalog`]). A PAC answers any of these
//! with `301 - XML mal formado`.
//!
//! Beyond the XSD: `catCFDI.xsd` still lists régimenes and usos the CFDI 4.0 catalogs retired
//! (609, 628–630, P01); those are refused against the 4.0 catalogs of [`crate::cfdi::catalogs`].
//! `LugarExpedicion` is checked against `c_CodigoPostal` (its runs of codes in
//! [`crate::cfdi::catalogs`]). Not checked: the elements' order and cardinality (the document
//! engine writes them; [`crate::cfdi::verify`] checks the required ones).

use chrono::NaiveDateTime;

use crate::cfdi::catalogs;
use crate::cfdi::dom::{Element, NS_CFDI};

/// An attribute's simple type, as the XSD declares it.
#[derive(Clone, Copy)]
enum Ty {
    /// `tdCFDI:t_RFC`.
    Rfc,
    /// `tdCFDI:t_FechaH`.
    FechaH,
    /// `tdCFDI:t_Importe`: `[0-9]{1,18}(.[0-9]{1,6})?`.
    Importe,
    /// `xs:decimal` with `fractionDigits` 6 and `minInclusive` 0.000001 (`true`) or 0.
    Decimal6 { positive: bool },
    /// `[0-9]{n}`.
    Digits(usize),
    /// `[^|]{1,max}`.
    Text(usize),
    /// `[0-9a-zA-Z]{min,max}`.
    Alnum(usize, usize),
    /// A string of 1 to `max` characters, no pattern.
    Len(usize),
    /// Any string (`Sello`, `Certificado`).
    Any,
    /// `fixed="4.0"`.
    Fixed(&'static str),
    /// The UUID pattern of `CfdiRelacionado`.
    Uuid,
    /// `xs:short`, `minInclusive` 2019.
    Year,
    /// `[0-9]{2}  [0-9]{2}  [0-9]{4}  [0-9]{7}`.
    Pedimento,
    /// A `catCFDI` enumeration.
    Cat(&'static str),
}

use Ty::*;

/// `(attribute, type, required)` for each element the XSD declares, by local name under its
/// parent.
const COMPROBANTE: &[(&str, Ty, bool)] = &[
    ("Version", Fixed("4.0"), true),
    ("Serie", Text(25), false),
    ("Folio", Text(40), false),
    ("Fecha", FechaH, true),
    ("Sello", Any, true),
    ("FormaPago", Cat("c_FormaPago"), false),
    ("NoCertificado", Digits(20), true),
    ("Certificado", Any, true),
    ("CondicionesDePago", Text(1000), false),
    ("SubTotal", Importe, true),
    ("Descuento", Importe, false),
    ("Moneda", Cat("c_Moneda"), true),
    ("TipoCambio", Decimal6 { positive: true }, false),
    ("Total", Importe, true),
    ("TipoDeComprobante", Cat("c_TipoDeComprobante"), true),
    ("Exportacion", Cat("c_Exportacion"), true),
    ("MetodoPago", Cat("c_MetodoPago"), false),
    ("LugarExpedicion", Cat("c_CodigoPostal"), true),
    ("Confirmacion", Alnum(5, 5), false),
];
const INFORMACION_GLOBAL: &[(&str, Ty, bool)] = &[
    ("Periodicidad", Cat("c_Periodicidad"), true),
    ("Meses", Cat("c_Meses"), true),
    ("Año", Year, true),
];
const CFDI_RELACIONADOS: &[(&str, Ty, bool)] = &[("TipoRelacion", Cat("c_TipoRelacion"), true)];
const CFDI_RELACIONADO: &[(&str, Ty, bool)] = &[("UUID", Uuid, true)];
const EMISOR: &[(&str, Ty, bool)] = &[
    ("Rfc", Rfc, true),
    ("Nombre", Text(300), true),
    ("RegimenFiscal", Cat("c_RegimenFiscal"), true),
    ("FacAtrAdquirente", Digits(10), false),
];
const RECEPTOR: &[(&str, Ty, bool)] = &[
    ("Rfc", Rfc, true),
    ("Nombre", Text(300), true),
    ("DomicilioFiscalReceptor", Digits(5), true),
    ("ResidenciaFiscal", Cat("c_Pais"), false),
    ("NumRegIdTrib", Len(40), false),
    ("RegimenFiscalReceptor", Cat("c_RegimenFiscal"), true),
    ("UsoCFDI", Cat("c_UsoCFDI"), true),
];
const CONCEPTO: &[(&str, Ty, bool)] = &[
    ("ClaveProdServ", Cat("c_ClaveProdServ"), true),
    ("NoIdentificacion", Text(100), false),
    ("Cantidad", Decimal6 { positive: true }, true),
    ("ClaveUnidad", Cat("c_ClaveUnidad"), true),
    ("Unidad", Text(20), false),
    ("Descripcion", Text(1000), true),
    ("ValorUnitario", Importe, true),
    ("Importe", Importe, true),
    ("Descuento", Importe, false),
    ("ObjetoImp", Cat("c_ObjetoImp"), true),
];
const CONCEPTO_TRASLADO: &[(&str, Ty, bool)] = &[
    ("Base", Decimal6 { positive: true }, true),
    ("Impuesto", Cat("c_Impuesto"), true),
    ("TipoFactor", Cat("c_TipoFactor"), true),
    ("TasaOCuota", Decimal6 { positive: false }, false),
    ("Importe", Importe, false),
];
const CONCEPTO_RETENCION: &[(&str, Ty, bool)] = &[
    ("Base", Decimal6 { positive: true }, true),
    ("Impuesto", Cat("c_Impuesto"), true),
    ("TipoFactor", Cat("c_TipoFactor"), true),
    ("TasaOCuota", Decimal6 { positive: false }, true),
    ("Importe", Importe, true),
];
const A_CUENTA_TERCEROS: &[(&str, Ty, bool)] = &[
    ("RfcACuentaTerceros", Rfc, true),
    ("NombreACuentaTerceros", Text(300), true),
    ("RegimenFiscalACuentaTerceros", Cat("c_RegimenFiscal"), true),
    ("DomicilioFiscalACuentaTerceros", Digits(5), true),
];
const INFORMACION_ADUANERA: &[(&str, Ty, bool)] = &[("NumeroPedimento", Pedimento, true)];
const CUENTA_PREDIAL: &[(&str, Ty, bool)] = &[("Numero", Alnum(1, 150), true)];
const PARTE: &[(&str, Ty, bool)] = &[
    ("ClaveProdServ", Cat("c_ClaveProdServ"), true),
    ("NoIdentificacion", Text(100), false),
    ("Cantidad", Decimal6 { positive: true }, true),
    ("Unidad", Text(20), false),
    ("Descripcion", Text(1000), true),
    ("ValorUnitario", Importe, false),
    ("Importe", Importe, false),
];
const IMPUESTOS: &[(&str, Ty, bool)] = &[
    ("TotalImpuestosRetenidos", Importe, false),
    ("TotalImpuestosTrasladados", Importe, false),
];
const IMPUESTOS_RETENCION: &[(&str, Ty, bool)] = &[
    ("Impuesto", Cat("c_Impuesto"), true),
    ("Importe", Importe, true),
];
const IMPUESTOS_TRASLADO: &[(&str, Ty, bool)] = &[
    ("Base", Importe, true),
    ("Impuesto", Cat("c_Impuesto"), true),
    ("TipoFactor", Cat("c_TipoFactor"), true),
    ("TasaOCuota", Decimal6 { positive: false }, false),
    ("Importe", Importe, false),
];

/// The `cfdi:` descendants of `e` along `names`.
fn ch<'a>(e: &'a Element, names: &[&'static str]) -> Vec<&'a Element> {
    e.path(NS_CFDI, names)
}

/// Every way the comprobante's attributes break the XSD (empty when none).
pub fn check(root: &Element) -> Vec<String> {
    let mut out = Vec::new();
    if !root.is(NS_CFDI, "Comprobante") {
        out.push("the root is not cfdi:Comprobante".into());
        return out;
    }
    let mut relations = Vec::new();
    let mut at = |e: &Element, label: &str, spec: &[(&str, Ty, bool)]| {
        attrs(e, label, spec, &mut out);
    };
    at(root, "Comprobante", COMPROBANTE);
    for e in ch(root, &["InformacionGlobal"]) {
        at(e, "InformacionGlobal", INFORMACION_GLOBAL);
    }
    let groups = ch(root, &["CfdiRelacionados"]);
    for rel in &groups {
        at(rel, "CfdiRelacionados", CFDI_RELACIONADOS);
        let related = ch(rel, &["CfdiRelacionado"]);
        if related.is_empty() {
            relations.push("CfdiRelacionados needs at least one CfdiRelacionado (UUID)".into());
        }
        for e in related {
            at(e, "CfdiRelacionado", CFDI_RELACIONADO);
        }
    }
    // A nota de crédito credits a stamped CFDI: PACs refuse an egreso that names none.
    if root.attr("TipoDeComprobante") == Some("E") && groups.is_empty() {
        relations.push(
            "an egreso (TipoDeComprobante E) must name the CFDI it credits in CfdiRelacionados"
                .to_owned(),
        );
    }
    for e in ch(root, &["Emisor"]) {
        at(e, "Emisor", EMISOR);
    }
    for e in ch(root, &["Receptor"]) {
        at(e, "Receptor", RECEPTOR);
    }
    for (i, c) in ch(root, &["Conceptos", "Concepto"]).into_iter().enumerate() {
        let n = i + 1;
        at(c, &format!("Concepto[{n}]"), CONCEPTO);
        for e in ch(c, &["Impuestos", "Traslados", "Traslado"]) {
            at(e, &format!("Concepto[{n}]/Traslado"), CONCEPTO_TRASLADO);
        }
        for e in ch(c, &["Impuestos", "Retenciones", "Retencion"]) {
            at(e, &format!("Concepto[{n}]/Retencion"), CONCEPTO_RETENCION);
        }
        for e in ch(c, &["ACuentaTerceros"]) {
            at(
                e,
                &format!("Concepto[{n}]/ACuentaTerceros"),
                A_CUENTA_TERCEROS,
            );
        }
        for e in ch(c, &["InformacionAduanera"]) {
            at(
                e,
                &format!("Concepto[{n}]/InformacionAduanera"),
                INFORMACION_ADUANERA,
            );
        }
        for e in ch(c, &["CuentaPredial"]) {
            at(e, &format!("Concepto[{n}]/CuentaPredial"), CUENTA_PREDIAL);
        }
        for p in ch(c, &["Parte"]) {
            at(p, &format!("Concepto[{n}]/Parte"), PARTE);
            for e in ch(p, &["InformacionAduanera"]) {
                at(
                    e,
                    &format!("Concepto[{n}]/Parte/InformacionAduanera"),
                    INFORMACION_ADUANERA,
                );
            }
        }
    }
    for imp in ch(root, &["Impuestos"]) {
        at(imp, "Impuestos", IMPUESTOS);
        for e in ch(imp, &["Retenciones", "Retencion"]) {
            at(e, "Impuestos/Retencion", IMPUESTOS_RETENCION);
        }
        for e in ch(imp, &["Traslados", "Traslado"]) {
            at(e, "Impuestos/Traslado", IMPUESTOS_TRASLADO);
        }
    }
    // The 4.0 catalogs, narrower than catCFDI.xsd for régimen and uso.
    for (el, attr) in [
        ("Emisor", "RegimenFiscal"),
        ("Receptor", "RegimenFiscalReceptor"),
    ] {
        if let Some(v) = root.child(NS_CFDI, el).and_then(|e| e.attr(attr))
            && cat_ok("c_RegimenFiscal", v)
            && !catalogs::is_regimen(v)
        {
            out.push(format!(
                "{el}@{attr} `{v}` is not in the CFDI 4.0 c_RegimenFiscal"
            ));
        }
    }
    if let Some(v) = root
        .child(NS_CFDI, "Receptor")
        .and_then(|e| e.attr("UsoCFDI"))
        && cat_ok("c_UsoCFDI", v)
        && catalogs::uso_allows(v, "").is_none()
    {
        out.push(format!(
            "Receptor@UsoCFDI `{v}` is not in the CFDI 4.0 c_UsoCFDI"
        ));
    }
    out.extend(relations);
    out
}

fn attrs(e: &Element, label: &str, spec: &[(&str, Ty, bool)], out: &mut Vec<String>) {
    for &(name, ty, required) in spec {
        match e.attr(name) {
            None if required => out.push(format!("{label}@{name} is required")),
            None => {}
            Some(v) => {
                if let Err(why) = valid(ty, v) {
                    out.push(format!("{label}@{name} `{v}` {why}"));
                }
            }
        }
    }
}

/// XSD `whiteSpace="collapse"`: trimmed, inner runs of spaces made one.
fn collapse(v: &str) -> String {
    v.split(' ')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn cat_ok(cat: &str, v: &str) -> bool {
    if cat == "c_CodigoPostal" {
        // Kept as runs of codes, not as an enumeration (95,777 of them).
        return catalogs::is_codigo_postal(v);
    }
    catalogs::in_xsd_catalog(cat, v)
}

fn digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Two digits in `lo..=hi`.
fn two_in(s: &str, lo: u32, hi: u32) -> bool {
    s.len() == 2 && digits(s) && s.parse::<u32>().is_ok_and(|n| (lo..=hi).contains(&n))
}

fn valid(ty: Ty, raw: &str) -> Result<(), String> {
    let v = match ty {
        // No whiteSpace facet on the pedimento: its pattern counts the spaces.
        Pedimento => raw.to_owned(),
        _ => collapse(raw),
    };
    let ok = match ty {
        Rfc => rfc(&v),
        FechaH => fecha_h(&v),
        Importe => importe(&v),
        Decimal6 { positive } => decimal6(&v, positive),
        Digits(n) => v.len() == n && digits(&v),
        Text(max) => {
            let n = v.chars().count();
            (1..=max).contains(&n) && !v.contains('|')
        }
        Alnum(min, max) => {
            (min..=max).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_alphanumeric())
        }
        Len(max) => (1..=max).contains(&v.chars().count()),
        Any => true,
        Fixed(f) => v == f,
        Uuid => uuid(&v),
        Year => v.parse::<i16>().is_ok_and(|y| y >= 2019),
        Pedimento => pedimento(&v),
        Cat(cat) => {
            return if cat_ok(cat, &v) {
                Ok(())
            } else {
                Err(format!("is not in {cat}"))
            };
        }
    };
    if ok {
        Ok(())
    } else {
        Err(format!("does not match {}", describe(ty)))
    }
}

fn describe(ty: Ty) -> String {
    match ty {
        Rfc => "t_RFC ([A-Z&Ñ]{3,4}[0-9]{2}MMDD[A-Z0-9]{2}[0-9A])".into(),
        FechaH => "t_FechaH (AAAA-MM-DDThh:mm:ss)".into(),
        Importe => "t_Importe ([0-9]{1,18}(.[0-9]{1,6})?)".into(),
        Decimal6 { positive: true } => "a decimal ≥ 0.000001 with at most 6 decimals".into(),
        Decimal6 { positive: false } => "a decimal ≥ 0 with at most 6 decimals".into(),
        Digits(n) => format!("[0-9]{{{n}}}"),
        Text(max) => format!("[^|]{{1,{max}}}"),
        Alnum(min, max) => format!("[0-9a-zA-Z]{{{min},{max}}}"),
        Len(max) => format!("a string of 1 to {max} characters"),
        Any => "a string".into(),
        Fixed(f) => format!("the fixed value {f}"),
        Uuid => "the UUID pattern".into(),
        Year => "a year from 2019".into(),
        Pedimento => "[0-9]{2}  [0-9]{2}  [0-9]{4}  [0-9]{7}".into(),
        Cat(c) => c.into(),
    }
}

/// `[A-Z&Ñ]{3,4}[0-9]{2}(0[1-9]|1[012])(0[1-9]|[12][0-9]|3[01])[A-Z0-9]{2}[0-9A]`, 12 or 13
/// characters.
fn rfc(v: &str) -> bool {
    let c: Vec<char> = v.chars().collect();
    let n = c.len();
    if !(12..=13).contains(&n) {
        return false;
    }
    let p = n - 9;
    let s = |a: usize, b: usize| c[a..b].iter().collect::<String>();
    c[..p]
        .iter()
        .all(|ch| ch.is_ascii_uppercase() || *ch == '&' || *ch == 'Ñ')
        && digits(&s(p, p + 2))
        && two_in(&s(p + 2, p + 4), 1, 12)
        && two_in(&s(p + 4, p + 6), 1, 31)
        && c[p + 6..p + 8]
            .iter()
            .all(|ch| ch.is_ascii_uppercase() || ch.is_ascii_digit())
        && (c[p + 8].is_ascii_digit() || c[p + 8] == 'A')
}

/// `(20[1-9][0-9])-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T(([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9])`,
/// and a real `xs:dateTime` (no 30 February).
fn fecha_h(v: &str) -> bool {
    let b = v.as_bytes();
    b.len() == 19
        && v.starts_with("20")
        && b[2].is_ascii_digit()
        && b[2] != b'0'
        && b[3].is_ascii_digit()
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && two_in(&v[5..7], 1, 12)
        && two_in(&v[8..10], 1, 31)
        && two_in(&v[11..13], 0, 23)
        && two_in(&v[14..16], 0, 59)
        && two_in(&v[17..19], 0, 59)
        && NaiveDateTime::parse_from_str(v, "%Y-%m-%dT%H:%M:%S").is_ok()
}

/// `[0-9]{1,18}(.[0-9]{1,6})?` (the `.` must be the decimal point: the type is `xs:decimal`).
fn importe(v: &str) -> bool {
    let (int, frac) = match v.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (v, None),
    };
    digits(int) && int.len() <= 18 && frac.is_none_or(|f| digits(f) && f.len() <= 6)
}

/// An `xs:decimal` with `fractionDigits` 6 (trailing zeros do not count: the facet constrains
/// the value) and `minInclusive` 0.000001 or 0.
fn decimal6(v: &str, positive: bool) -> bool {
    let (negative, body) = match v.as_bytes().first() {
        Some(b'-') => (true, &v[1..]),
        Some(b'+') => (false, &v[1..]),
        _ => (false, v),
    };
    let (int, frac) = match body.split_once('.') {
        Some((i, f)) => (i, f),
        None => (body, ""),
    };
    let lexical = (int.is_empty() || digits(int))
        && (frac.is_empty() || digits(frac))
        && !(int.is_empty() && frac.is_empty());
    if !lexical || frac.trim_end_matches('0').len() > 6 {
        return false;
    }
    let zero = int.bytes().all(|b| b == b'0') && frac.bytes().all(|b| b == b'0');
    if zero { !positive } else { !negative }
}

fn uuid(v: &str) -> bool {
    let groups: Vec<&str> = v.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn pedimento(v: &str) -> bool {
    let parts: Vec<&str> = v.split("  ").collect();
    parts.len() == 4
        && parts
            .iter()
            .zip([2, 2, 4, 7])
            .all(|(p, n)| p.len() == n && digits(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The structure problems about CfdiRelacionados of the egreso sample 09 after `edit`.
    fn relacionados_problems(edit: impl Fn(String) -> String) -> Vec<String> {
        let json = crate::sandbox::SAMPLE_REQUESTS
            .iter()
            .find(|(n, _)| *n == "09-egreso-reembolso-parcial")
            .map(|(_, j)| *j)
            .expect("sample");
        let req: crate::cfdi::InvoiceRequest = serde_json::from_str(json).expect("request");
        let c = crate::cfdi::build(&req, "30001000000500003416").expect("builds");
        let xml = edit(String::from_utf8(crate::cfdi::xml::to_xml(&c)).expect("utf-8"));
        let root = Element::parse(xml.as_bytes()).expect("parses");
        check(&root)
            .into_iter()
            .filter(|p| p.contains("CfdiRelacionad"))
            .collect()
    }

    #[test]
    fn an_egreso_must_name_what_it_credits_with_well_formed_relacionados() {
        assert!(relacionados_problems(|x| x).is_empty());
        let start = |x: &str| x.find("<cfdi:CfdiRelacionados").expect("relacionados");
        let end = |x: &str| x.find("</cfdi:CfdiRelacionados>").expect("end") + 25;
        let without = relacionados_problems(|x| format!("{}{}", &x[..start(&x)], &x[end(&x)..]));
        assert_eq!(without.len(), 1, "{without:?}");
        assert!(without[0].contains("must name the CFDI it credits"));
        let empty = relacionados_problems(|x| {
            let inner = x.find("<cfdi:CfdiRelacionado ").expect("one");
            let close = inner + x[inner..].find("/>").expect("empty element") + 2;
            format!("{}{}", &x[..inner], &x[close..])
        });
        assert!(
            empty
                .iter()
                .any(|p| p.contains("at least one CfdiRelacionado")),
            "{empty:?}"
        );
        let bad = relacionados_problems(|x| x.replace("5FB2822E-396D", "NOT-A-UUID"));
        assert!(bad.iter().any(|p| p.contains("CfdiRelacionado")), "{bad:?}");
    }

    #[test]
    fn the_facets_read_as_the_xsd_says() {
        assert!(rfc("EKU9003173C9") && rfc("XIQB891116QE4") && rfc("AAA010101AAA"));
        assert!(rfc("&ÑA010101AA1"));
        assert!(!rfc("EKU9013173C9") && !rfc("eku9003173C9") && !rfc("EKU9003173CB"));
        assert!(!rfc("EK9003173C9") && !rfc("EKU900317"));
        assert!(fecha_h("2026-01-02T10:00:00"));
        assert!(!fecha_h("2026-01-02 10:00:00") && !fecha_h("2026-02-30T10:00:00"));
        assert!(!fecha_h("2009-01-02T10:00:00") && !fecha_h("2026-01-02T24:00:00"));
        assert!(importe("0") && importe("578.84") && importe("1.123456"));
        assert!(!importe("1.1234567") && !importe("-1.00") && !importe("1.") && !importe(".5"));
        assert!(!importe("1,00"));
        assert!(decimal6("1", true) && decimal6("0.000001", true) && decimal6("1.50000000", true));
        assert!(!decimal6("0", true) && decimal6("0", false) && decimal6("0.160000", false));
        assert!(!decimal6("1.0000001", true) && !decimal6("-1", true) && !decimal6("abc", true));
        assert!(uuid("6F1C0B6E-0000-4000-8000-000000000001") && !uuid("6F1C0B6E"));
        assert!(pedimento("21  47  3807  8003832") && !pedimento("21 47 3807 8003832"));
        assert_eq!(collapse("  a   b "), "a b");
        assert!(cat_ok("c_ClaveProdServ", "01010101") && cat_ok("c_ClaveUnidad", "H87"));
        assert!(cat_ok("c_ClaveUnidad", "DX") && !cat_ok("c_ClaveUnidad", "Dx"));
        assert!(cat_ok("c_RegimenFiscal", "609") && !catalogs::is_regimen("609"));
        assert!(!cat_ok("c_FormaPago", "77") && cat_ok("c_UsoCFDI", "S01"));
    }
}
