//! The cadena original, exactly as the SAT stylesheets derive it.
//!
//! Each function mirrors one template of `cadenaoriginal_4_0.xslt` (and of `Pagos20.xslt` and
//! `cadenaoriginal_TFD_1_1.xslt`), in the same order. `Requerido` always writes `|value`,
//! `Opcional` writes `|value` only when the attribute exists (even if empty), and both pass the
//! value through XPath `normalize-space`. Elements the stylesheet has no template for fall to
//! XSLT's built-in rule, which copies their text content.

use super::dom::{Element, NS_CFDI, NS_PAGOS20, NS_TFD, Node};

/// Why a cadena cannot be derived.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CadenaError {
    #[error("the root element is not cfdi:Comprobante (http://www.sat.gob.mx/cfd/4)")]
    NotComprobante,
    #[error("the document has no tfd:TimbreFiscalDigital")]
    NoTfd,
    #[error(
        "complemento {0} is not supported by this implementation; use the SAT XSLT for this document"
    )]
    UnsupportedComplemento(String),
}

/// Namespaces of complementos the SAT stylesheet has templates for but we do not implement.
const KNOWN_UNSUPPORTED: &[&str] = &[
    "http://www.sat.gob.mx/ComercioExterior11",
    "http://www.sat.gob.mx/ComercioExterior20",
    "http://www.sat.gob.mx/donat",
    "http://www.sat.gob.mx/divisas",
    "http://www.sat.gob.mx/implocal",
    "http://www.sat.gob.mx/leyendasFiscales",
    "http://www.sat.gob.mx/pfic",
    "http://www.sat.gob.mx/TuristaPasajeroExtranjero",
    "http://www.sat.gob.mx/nomina12",
    "http://www.sat.gob.mx/registrofiscal",
    "http://www.sat.gob.mx/pagoenespecie",
    "http://www.sat.gob.mx/aerolineas",
    "http://www.sat.gob.mx/valesdedespensa",
    "http://www.sat.gob.mx/notariospublicos",
    "http://www.sat.gob.mx/vehiculousado",
    "http://www.sat.gob.mx/servicioparcialconstruccion",
    "http://www.sat.gob.mx/renovacionysustitucionvehiculos",
    "http://www.sat.gob.mx/certificadodestruccion",
    "http://www.sat.gob.mx/arteantiguedades",
    "http://www.sat.gob.mx/ine",
    "http://www.sat.gob.mx/iedu",
    "http://www.sat.gob.mx/ventavehiculos",
    "http://www.sat.gob.mx/detallista",
    "http://www.sat.gob.mx/EstadoDeCuentaCombustible12",
    "http://www.sat.gob.mx/ConsumoDeCombustibles11",
    "http://www.sat.gob.mx/GastosHidrocarburos10",
    "http://www.sat.gob.mx/IngresosHidrocarburos10",
    "http://www.sat.gob.mx/CartaPorte20",
    "http://www.sat.gob.mx/CartaPorte30",
    "http://www.sat.gob.mx/CartaPorte31",
    "http://www.sat.gob.mx/hidrocarburospetroliferos",
];

/// XPath `normalize-space`: trim XML whitespace and collapse inner runs to one space.
pub fn normalize_space(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for word in s.split([' ', '\t', '\r', '\n']).filter(|w| !w.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

struct Out(String);

impl Out {
    fn req(&mut self, e: &Element, attr: &str) {
        self.0.push('|');
        if let Some(v) = e.attr(attr) {
            self.0.push_str(&normalize_space(v));
        }
    }
    fn opt(&mut self, e: &Element, attr: &str) {
        if let Some(v) = e.attr(attr) {
            self.0.push('|');
            self.0.push_str(&normalize_space(v));
        }
    }
    fn reqs(&mut self, e: &Element, attrs: &[&str]) {
        attrs.iter().for_each(|a| self.req(e, a));
    }
}

/// The cadena original of a CFDI 4.0 document (parsed).
pub fn cadena_comprobante(root: &Element) -> Result<String, CadenaError> {
    if !root.is(NS_CFDI, "Comprobante") {
        return Err(CadenaError::NotComprobante);
    }
    let mut o = Out(String::with_capacity(1024));
    o.0.push('|');
    let c = root;
    o.req(c, "Version");
    o.opt(c, "Serie");
    o.opt(c, "Folio");
    o.req(c, "Fecha");
    o.opt(c, "FormaPago");
    o.req(c, "NoCertificado");
    o.opt(c, "CondicionesDePago");
    o.req(c, "SubTotal");
    o.opt(c, "Descuento");
    o.req(c, "Moneda");
    o.opt(c, "TipoCambio");
    o.req(c, "Total");
    o.req(c, "TipoDeComprobante");
    o.req(c, "Exportacion");
    o.opt(c, "MetodoPago");
    o.req(c, "LugarExpedicion");
    o.opt(c, "Confirmacion");
    if let Some(g) = c.child(NS_CFDI, "InformacionGlobal") {
        o.reqs(g, &["Periodicidad", "Meses", "Año"]);
    }
    for rel in c.children_named(NS_CFDI, "CfdiRelacionados") {
        o.req(rel, "TipoRelacion");
        for r in rel.children_named(NS_CFDI, "CfdiRelacionado") {
            o.req(r, "UUID");
        }
    }
    // `apply-templates select="./cfdi:Emisor"` visits every match, hence the loops.
    for e in c.children_named(NS_CFDI, "Emisor") {
        o.reqs(e, &["Rfc", "Nombre", "RegimenFiscal"]);
        o.opt(e, "FacAtrAdquirente");
    }
    for r in c.children_named(NS_CFDI, "Receptor") {
        o.reqs(r, &["Rfc", "Nombre", "DomicilioFiscalReceptor"]);
        o.opt(r, "ResidenciaFiscal");
        o.opt(r, "NumRegIdTrib");
        o.reqs(r, &["RegimenFiscalReceptor", "UsoCFDI"]);
    }
    for conceptos in c.children_named(NS_CFDI, "Conceptos") {
        for concepto in conceptos.children_named(NS_CFDI, "Concepto") {
            write_concepto(&mut o, concepto)?;
        }
    }
    for imp in c.children_named(NS_CFDI, "Impuestos") {
        for r in imp.path(NS_CFDI, &["Retenciones", "Retencion"]) {
            o.reqs(r, &["Impuesto", "Importe"]);
        }
        o.opt(imp, "TotalImpuestosRetenidos");
        for t in imp.path(NS_CFDI, &["Traslados", "Traslado"]) {
            o.reqs(t, &["Base", "Impuesto", "TipoFactor"]);
            o.opt(t, "TasaOCuota");
            o.opt(t, "Importe");
        }
        o.opt(imp, "TotalImpuestosTrasladados");
    }
    for comp in c.children_named(NS_CFDI, "Complemento") {
        for child in comp.elements() {
            write_complemento(&mut o, child)?;
        }
    }
    o.0.push_str("||");
    Ok(o.0)
}

fn write_concepto(o: &mut Out, c: &Element) -> Result<(), CadenaError> {
    o.req(c, "ClaveProdServ");
    o.opt(c, "NoIdentificacion");
    o.reqs(c, &["Cantidad", "ClaveUnidad"]);
    o.opt(c, "Unidad");
    o.reqs(c, &["Descripcion", "ValorUnitario", "Importe"]);
    o.opt(c, "Descuento");
    o.req(c, "ObjetoImp");
    for t in c.path(NS_CFDI, &["Impuestos", "Traslados", "Traslado"]) {
        o.reqs(t, &["Base", "Impuesto", "TipoFactor"]);
        o.opt(t, "TasaOCuota");
        o.opt(t, "Importe");
    }
    for r in c.path(NS_CFDI, &["Impuestos", "Retenciones", "Retencion"]) {
        o.reqs(
            r,
            &["Base", "Impuesto", "TipoFactor", "TasaOCuota", "Importe"],
        );
    }
    for t in c.children_named(NS_CFDI, "ACuentaTerceros") {
        o.reqs(
            t,
            &[
                "RfcACuentaTerceros",
                "NombreACuentaTerceros",
                "RegimenFiscalACuentaTerceros",
                "DomicilioFiscalACuentaTerceros",
            ],
        );
    }
    for a in c.children_named(NS_CFDI, "InformacionAduanera") {
        o.req(a, "NumeroPedimento");
    }
    for p in c.children_named(NS_CFDI, "CuentaPredial") {
        o.req(p, "Numero");
    }
    for cc in c.children_named(NS_CFDI, "ComplementoConcepto") {
        for child in cc.elements() {
            write_complemento(o, child)?;
        }
    }
    // `.//cfdi:Parte`: every descendant Parte, in document order.
    let mut partes = Vec::new();
    descendants_named(c, NS_CFDI, "Parte", &mut partes);
    for p in partes {
        o.req(p, "ClaveProdServ");
        o.opt(p, "NoIdentificacion");
        o.req(p, "Cantidad");
        o.opt(p, "Unidad");
        o.req(p, "Descripcion");
        o.opt(p, "ValorUnitario");
        o.opt(p, "Importe");
        let mut aduana = Vec::new();
        descendants_named(p, NS_CFDI, "InformacionAduanera", &mut aduana);
        for a in aduana {
            o.req(a, "NumeroPedimento");
        }
    }
    Ok(())
}

fn descendants_named<'a>(e: &'a Element, ns: &str, name: &str, out: &mut Vec<&'a Element>) {
    for child in e.elements() {
        if child.is(ns, name) {
            out.push(child);
        }
        descendants_named(child, ns, name, out);
    }
}

fn write_complemento(o: &mut Out, e: &Element) -> Result<(), CadenaError> {
    let ns = e.ns.as_deref().unwrap_or("");
    if e.is(NS_PAGOS20, "Pagos") {
        write_pagos20(o, e);
        return Ok(());
    }
    if KNOWN_UNSUPPORTED.contains(&ns) {
        return Err(CadenaError::UnsupportedComplemento(format!(
            "{{{ns}}}{}",
            e.name
        )));
    }
    // The TFD and any foreign element: XSLT's built-in rule copies text nodes verbatim.
    builtin_text(o, e);
    Ok(())
}

fn builtin_text(o: &mut Out, e: &Element) {
    for n in &e.children {
        match n {
            Node::Text(t) => o.0.push_str(t),
            Node::Element(c) => builtin_text(o, c),
        }
    }
}

fn write_pagos20(o: &mut Out, p: &Element) {
    let ns = NS_PAGOS20;
    o.req(p, "Version");
    for t in p.children_named(ns, "Totales") {
        for a in [
            "TotalRetencionesIVA",
            "TotalRetencionesISR",
            "TotalRetencionesIEPS",
            "TotalTrasladosBaseIVA16",
            "TotalTrasladosImpuestoIVA16",
            "TotalTrasladosBaseIVA8",
            "TotalTrasladosImpuestoIVA8",
            "TotalTrasladosBaseIVA0",
            "TotalTrasladosImpuestoIVA0",
            "TotalTrasladosBaseIVAExento",
        ] {
            o.opt(t, a);
        }
        o.req(t, "MontoTotalPagos");
    }
    for pago in p.children_named(ns, "Pago") {
        o.reqs(pago, &["FechaPago", "FormaDePagoP", "MonedaP"]);
        o.opt(pago, "TipoCambioP");
        o.req(pago, "Monto");
        for a in [
            "NumOperacion",
            "RfcEmisorCtaOrd",
            "NomBancoOrdExt",
            "CtaOrdenante",
            "RfcEmisorCtaBen",
            "CtaBeneficiario",
            "TipoCadPago",
            "CertPago",
            "CadPago",
            "SelloPago",
        ] {
            o.opt(pago, a);
        }
        for d in pago.children_named(ns, "DoctoRelacionado") {
            o.req(d, "IdDocumento");
            o.opt(d, "Serie");
            o.opt(d, "Folio");
            o.req(d, "MonedaDR");
            o.opt(d, "EquivalenciaDR");
            o.reqs(
                d,
                &[
                    "NumParcialidad",
                    "ImpSaldoAnt",
                    "ImpPagado",
                    "ImpSaldoInsoluto",
                    "ObjetoImpDR",
                ],
            );
            for r in d.path(ns, &["ImpuestosDR", "RetencionesDR", "RetencionDR"]) {
                o.reqs(
                    r,
                    &[
                        "BaseDR",
                        "ImpuestoDR",
                        "TipoFactorDR",
                        "TasaOCuotaDR",
                        "ImporteDR",
                    ],
                );
            }
            for t in d.path(ns, &["ImpuestosDR", "TrasladosDR", "TrasladoDR"]) {
                o.reqs(t, &["BaseDR", "ImpuestoDR", "TipoFactorDR"]);
                o.opt(t, "TasaOCuotaDR");
                o.opt(t, "ImporteDR");
            }
        }
        for imp in pago.children_named(ns, "ImpuestosP") {
            for rs in imp.children_named(ns, "RetencionesP") {
                for r in rs.children_named(ns, "RetencionP") {
                    o.reqs(r, &["ImpuestoP", "ImporteP"]);
                }
            }
            for ts in imp.children_named(ns, "TrasladosP") {
                for t in ts.children_named(ns, "TrasladoP") {
                    o.reqs(t, &["BaseP", "ImpuestoP", "TipoFactorP"]);
                    o.opt(t, "TasaOCuotaP");
                    o.opt(t, "ImporteP");
                }
            }
        }
    }
}

/// The TFD 1.1 cadena of a `tfd:TimbreFiscalDigital` element.
pub fn cadena_tfd(tfd: &Element) -> String {
    let mut o = Out(String::with_capacity(512));
    o.0.push('|');
    o.reqs(tfd, &["Version", "UUID", "FechaTimbrado", "RfcProvCertif"]);
    o.opt(tfd, "Leyenda");
    o.reqs(tfd, &["SelloCFD", "NoCertificadoSAT"]);
    o.0.push_str("||");
    o.0
}

/// Finds the TFD of a stamped comprobante (or returns the root itself when it is a TFD).
pub fn find_tfd(root: &Element) -> Option<&Element> {
    if root.is(NS_TFD, "TimbreFiscalDigital") {
        return Some(root);
    }
    root.children_named(NS_CFDI, "Complemento")
        .flat_map(|c| c.children_named(NS_TFD, "TimbreFiscalDigital"))
        .next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_space_trims_and_collapses() {
        assert_eq!(normalize_space("  a \t\n b   c "), "a b c");
        assert_eq!(normalize_space(""), "");
        // A non-breaking space is not XML whitespace.
        assert_eq!(normalize_space("a\u{a0} b"), "a\u{a0} b");
    }

    #[test]
    fn optional_attribute_present_but_empty_still_writes_a_pipe() {
        let xml = br#"<cfdi:Comprobante xmlns:cfdi="http://www.sat.gob.mx/cfd/4" Version="4.0" Serie=""/>"#;
        let root = Element::parse(xml).expect("parses");
        let cadena = cadena_comprobante(&root).expect("cadena");
        assert!(cadena.starts_with("||4.0||"), "{cadena}");
    }
}
