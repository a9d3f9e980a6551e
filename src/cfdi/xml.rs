//! Writes a `Comprobante` as CFDI 4.0 XML: UTF-8, attributes in the schema's order, values
//! escaped by quick-xml, two-space indentation. The same model always gives the same bytes.

use quick_xml::Writer;
use quick_xml::events::{BytesDecl, BytesEnd, BytesStart, Event};
use rust_decimal::Decimal;

use super::dom::{NS_CFDI, NS_PAGOS20, NS_TFD, NS_XSI};
use super::model::{Comprobante, Traslado};
use super::money::{fixed, line};
use super::pagos::Pagos;
use super::tfd::Tfd;

pub const SCHEMA_LOCATION_CFDI: &str =
    "http://www.sat.gob.mx/cfd/4 http://www.sat.gob.mx/sitio_internet/cfd/4/cfdv40.xsd";
pub const SCHEMA_LOCATION_PAGOS20: &str = "http://www.sat.gob.mx/cfd/4 http://www.sat.gob.mx/sitio_internet/cfd/4/cfdv40.xsd http://www.sat.gob.mx/Pagos20 http://www.sat.gob.mx/sitio_internet/cfd/Pagos/Pagos20.xsd";
pub const SCHEMA_LOCATION_TFD: &str = "http://www.sat.gob.mx/TimbreFiscalDigital http://www.sat.gob.mx/sitio_internet/cfd/TimbreFiscalDigital/TimbreFiscalDigitalv11.xsd";

/// Attributes in order; `None` values are left out.
struct Attrs<'a>(Vec<(&'a str, Option<String>)>);

impl<'a> Attrs<'a> {
    fn new() -> Self {
        Self(Vec::with_capacity(24))
    }
    fn req(mut self, k: &'a str, v: impl Into<String>) -> Self {
        self.0.push((k, Some(v.into())));
        self
    }
    fn opt(mut self, k: &'a str, v: Option<impl Into<String>>) -> Self {
        self.0.push((k, v.map(Into::into)));
        self
    }
    fn start(&self, name: &'a str) -> BytesStart<'a> {
        let mut s = BytesStart::new(name);
        for (k, v) in &self.0 {
            if let Some(v) = v {
                s.push_attribute((*k, v.as_str()));
            }
        }
        s
    }
}

struct W(Writer<Vec<u8>>);

impl W {
    fn empty(&mut self, name: &str, a: &Attrs<'_>) {
        self.ev(Event::Empty(a.start(name)));
    }
    fn open(&mut self, name: &str, a: &Attrs<'_>) {
        self.ev(Event::Start(a.start(name)));
    }
    fn close(&mut self, name: &str) {
        self.ev(Event::End(BytesEnd::new(name)));
    }
    fn ev(&mut self, e: Event<'_>) {
        // Writing into a Vec<u8> cannot fail.
        self.0.write_event(e).expect("writing XML to memory");
    }
}

fn tasa(d: Decimal) -> String {
    fixed(d, 6)
}

/// The XML of `c`.
pub fn to_xml(c: &Comprobante) -> Vec<u8> {
    let dec = c.moneda_decimals;
    let mut w = W(Writer::new_with_indent(Vec::with_capacity(4096), b' ', 2));
    w.ev(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)));
    let root = Attrs::new()
        .req("xmlns:cfdi", NS_CFDI)
        .opt("xmlns:pago20", c.pagos.as_ref().map(|_| NS_PAGOS20))
        .req("xmlns:xsi", NS_XSI)
        .req(
            "xsi:schemaLocation",
            if c.pagos.is_some() {
                SCHEMA_LOCATION_PAGOS20
            } else {
                SCHEMA_LOCATION_CFDI
            },
        )
        .req("Version", "4.0")
        .opt("Serie", c.serie.clone())
        .opt("Folio", c.folio.clone())
        .req("Fecha", c.fecha.clone())
        .opt("Sello", c.sello.clone())
        .opt("FormaPago", c.forma_pago.clone())
        .req("NoCertificado", c.no_certificado.clone())
        .opt("Certificado", c.certificado.clone())
        .opt("CondicionesDePago", c.condiciones_de_pago.clone())
        .req("SubTotal", fixed(c.subtotal, dec))
        .opt("Descuento", c.descuento.map(|d| fixed(d, dec)))
        .req("Moneda", c.moneda.clone())
        .opt("TipoCambio", c.tipo_cambio.map(|t| line(t, 0)))
        .req("Total", fixed(c.total, dec))
        .req("TipoDeComprobante", c.tipo_de_comprobante.clone())
        .req("Exportacion", c.exportacion.clone())
        .opt("MetodoPago", c.metodo_pago.clone())
        .req("LugarExpedicion", c.lugar_expedicion.clone());
    w.open("cfdi:Comprobante", &root);
    if let Some(g) = &c.informacion_global {
        let a = Attrs::new()
            .req("Periodicidad", g.periodicidad.clone())
            .req("Meses", g.meses.clone())
            .req("Año", g.anio.to_string());
        w.empty("cfdi:InformacionGlobal", &a);
    }
    for rel in &c.cfdi_relacionados {
        w.open(
            "cfdi:CfdiRelacionados",
            &Attrs::new().req("TipoRelacion", rel.tipo_relacion.clone()),
        );
        for u in &rel.uuids {
            w.empty("cfdi:CfdiRelacionado", &Attrs::new().req("UUID", u.clone()));
        }
        w.close("cfdi:CfdiRelacionados");
    }
    let e = &c.emisor;
    w.empty(
        "cfdi:Emisor",
        &Attrs::new()
            .req("Rfc", e.rfc.clone())
            .req("Nombre", e.nombre.clone())
            .req("RegimenFiscal", e.regimen_fiscal.clone()),
    );
    let r = &c.receptor;
    w.empty(
        "cfdi:Receptor",
        &Attrs::new()
            .req("Rfc", r.rfc.clone())
            .req("Nombre", r.nombre.clone())
            .req(
                "DomicilioFiscalReceptor",
                r.domicilio_fiscal_receptor.clone(),
            )
            .req("RegimenFiscalReceptor", r.regimen_fiscal_receptor.clone())
            .req("UsoCFDI", r.uso_cfdi.clone()),
    );
    w.open("cfdi:Conceptos", &Attrs::new());
    for k in &c.conceptos {
        let a = Attrs::new()
            .req("ClaveProdServ", k.clave_prod_serv.clone())
            .opt("NoIdentificacion", k.no_identificacion.clone())
            .req("Cantidad", line(k.cantidad, 0))
            .req("ClaveUnidad", k.clave_unidad.clone())
            .opt("Unidad", k.unidad.clone())
            .req("Descripcion", k.descripcion.clone())
            .req("ValorUnitario", line(k.valor_unitario, dec))
            .req("Importe", line(k.importe, dec))
            .opt("Descuento", k.descuento.map(|d| line(d, dec)))
            .req("ObjetoImp", k.objeto_imp.clone());
        if k.traslados.is_empty() && k.retenciones.is_empty() {
            w.empty("cfdi:Concepto", &a);
            continue;
        }
        w.open("cfdi:Concepto", &a);
        w.open("cfdi:Impuestos", &Attrs::new());
        if !k.traslados.is_empty() {
            w.open("cfdi:Traslados", &Attrs::new());
            for t in &k.traslados {
                w.empty("cfdi:Traslado", &traslado(t, |d| line(d, dec)));
            }
            w.close("cfdi:Traslados");
        }
        if !k.retenciones.is_empty() {
            w.open("cfdi:Retenciones", &Attrs::new());
            for r in &k.retenciones {
                let a = Attrs::new()
                    .req("Base", line(r.base, dec))
                    .req("Impuesto", r.impuesto.clone())
                    .req("TipoFactor", "Tasa")
                    .req("TasaOCuota", tasa(r.tasa))
                    .req("Importe", line(r.importe, dec));
                w.empty("cfdi:Retencion", &a);
            }
            w.close("cfdi:Retenciones");
        }
        w.close("cfdi:Impuestos");
        w.close("cfdi:Concepto");
    }
    w.close("cfdi:Conceptos");
    if let Some(i) = &c.impuestos {
        let a = Attrs::new()
            .opt(
                "TotalImpuestosRetenidos",
                i.total_retenidos.map(|d| fixed(d, dec)),
            )
            .opt(
                "TotalImpuestosTrasladados",
                i.total_trasladados.map(|d| fixed(d, dec)),
            );
        w.open("cfdi:Impuestos", &a);
        if !i.retenciones.is_empty() {
            w.open("cfdi:Retenciones", &Attrs::new());
            for (imp, importe) in &i.retenciones {
                let a = Attrs::new()
                    .req("Impuesto", imp.clone())
                    .req("Importe", fixed(*importe, dec));
                w.empty("cfdi:Retencion", &a);
            }
            w.close("cfdi:Retenciones");
        }
        if !i.traslados.is_empty() {
            w.open("cfdi:Traslados", &Attrs::new());
            for t in &i.traslados {
                w.empty("cfdi:Traslado", &traslado(t, |d| fixed(d, dec)));
            }
            w.close("cfdi:Traslados");
        }
        w.close("cfdi:Impuestos");
    }
    if c.tfd.is_some() || c.pagos.is_some() {
        w.open("cfdi:Complemento", &Attrs::new());
        if let Some(p) = &c.pagos {
            write_pagos(&mut w, p);
        }
        if let Some(tfd) = &c.tfd {
            write_tfd(&mut w, tfd);
        }
        w.close("cfdi:Complemento");
    }
    w.close("cfdi:Comprobante");
    w.0.into_inner()
}

fn write_pagos(w: &mut W, p: &Pagos) {
    w.open("pago20:Pagos", &Attrs::new().req("Version", "2.0"));
    let t = &p.totales;
    let mxn = |d: Option<rust_decimal::Decimal>| d.map(|d| fixed(d, 2));
    w.empty(
        "pago20:Totales",
        &Attrs::new()
            .opt("TotalTrasladosBaseIVA16", mxn(t.base_iva16))
            .opt("TotalTrasladosImpuestoIVA16", mxn(t.impuesto_iva16))
            .opt("TotalTrasladosBaseIVA8", mxn(t.base_iva8))
            .opt("TotalTrasladosImpuestoIVA8", mxn(t.impuesto_iva8))
            .opt("TotalTrasladosBaseIVA0", mxn(t.base_iva0))
            .opt("TotalTrasladosImpuestoIVA0", mxn(t.impuesto_iva0))
            .opt("TotalTrasladosBaseIVAExento", mxn(t.base_exento))
            .req("MontoTotalPagos", fixed(t.monto_total_pagos, 2)),
    );
    let pago = &p.pago;
    let a = Attrs::new()
        .req("FechaPago", pago.fecha_pago.clone())
        .req("FormaDePagoP", pago.forma_pago.clone())
        .req("MonedaP", pago.moneda.clone())
        .req("TipoCambioP", line(pago.tipo_cambio, 0))
        .req("Monto", fixed(pago.monto, pago.moneda_decimals))
        .opt("NumOperacion", pago.num_operacion.clone());
    w.open("pago20:Pago", &a);
    let d = &pago.docto;
    let dec = d.moneda_decimals;
    let a = Attrs::new()
        .req("IdDocumento", d.id_documento.clone())
        .opt("Serie", d.serie.clone())
        .opt("Folio", d.folio.clone())
        .req("MonedaDR", d.moneda.clone())
        .req("EquivalenciaDR", line(d.equivalencia, 0))
        .req("NumParcialidad", d.num_parcialidad.to_string())
        .req("ImpSaldoAnt", fixed(d.saldo_anterior, dec))
        .req("ImpPagado", fixed(d.pagado, dec))
        .req("ImpSaldoInsoluto", fixed(d.saldo_insoluto, dec))
        .req("ObjetoImpDR", d.objeto_imp.clone());
    if d.traslados.is_empty() {
        w.empty("pago20:DoctoRelacionado", &a);
    } else {
        w.open("pago20:DoctoRelacionado", &a);
        w.open("pago20:ImpuestosDR", &Attrs::new());
        w.open("pago20:TrasladosDR", &Attrs::new());
        for t in &d.traslados {
            w.empty("pago20:TrasladoDR", &traslado_in(t, TRASLADO_DR, dec));
        }
        w.close("pago20:TrasladosDR");
        w.close("pago20:ImpuestosDR");
        w.close("pago20:DoctoRelacionado");
    }
    if !pago.traslados.is_empty() {
        w.open("pago20:ImpuestosP", &Attrs::new());
        w.open("pago20:TrasladosP", &Attrs::new());
        for t in &pago.traslados {
            w.empty(
                "pago20:TrasladoP",
                &traslado_in(t, TRASLADO_P, pago.moneda_decimals),
            );
        }
        w.close("pago20:TrasladosP");
        w.close("pago20:ImpuestosP");
    }
    w.close("pago20:Pago");
    w.close("pago20:Pagos");
}

/// A Pagos 2.0 traslado: `names` are its attributes (`BaseDR`, `ImpuestoDR`, … or `BaseP`, …).
fn traslado_in(t: &Traslado, names: [&'static str; 5], dec: u32) -> Attrs<'static> {
    let [base, impuesto, factor, tasa_n, importe] = names;
    Attrs::new()
        .req(base, line(t.base, dec))
        .req(impuesto, t.impuesto.clone())
        .req(factor, t.tipo_factor.clone())
        .opt(tasa_n, t.tasa.map(tasa))
        .opt(importe, t.importe.map(|d| line(d, dec)))
}

const TRASLADO_DR: [&str; 5] = [
    "BaseDR",
    "ImpuestoDR",
    "TipoFactorDR",
    "TasaOCuotaDR",
    "ImporteDR",
];
const TRASLADO_P: [&str; 5] = [
    "BaseP",
    "ImpuestoP",
    "TipoFactorP",
    "TasaOCuotaP",
    "ImporteP",
];

fn traslado(t: &Traslado, amount: impl Fn(Decimal) -> String) -> Attrs<'static> {
    Attrs::new()
        .req("Base", amount(t.base))
        .req("Impuesto", t.impuesto.clone())
        .req("TipoFactor", t.tipo_factor.clone())
        .opt("TasaOCuota", t.tasa.map(tasa))
        .opt("Importe", t.importe.map(amount))
}

fn tfd_attrs(t: &Tfd) -> Attrs<'static> {
    Attrs::new()
        .req("xmlns:tfd", NS_TFD)
        .req("xmlns:xsi", NS_XSI)
        .req("xsi:schemaLocation", SCHEMA_LOCATION_TFD)
        .req("Version", "1.1")
        .req("UUID", t.uuid.clone())
        .req("FechaTimbrado", t.fecha_timbrado.clone())
        .req("RfcProvCertif", t.rfc_prov_certif.clone())
        .opt("Leyenda", t.leyenda.clone())
        .req("SelloCFD", t.sello_cfd.clone())
        .req("NoCertificadoSAT", t.no_certificado_sat.clone())
        .req("SelloSAT", t.sello_sat.clone())
}

fn write_tfd(w: &mut W, t: &Tfd) {
    w.empty("tfd:TimbreFiscalDigital", &tfd_attrs(t));
}

/// The `tfd:TimbreFiscalDigital` element alone, as its own XML document.
pub fn tfd_to_xml(t: &Tfd) -> Vec<u8> {
    let mut w = W(Writer::new(Vec::with_capacity(1024)));
    w.ev(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)));
    write_tfd(&mut w, t);
    w.0.into_inner()
}

/// The TFD element without a declaration, to splice into a stamped document.
pub fn tfd_element(t: &Tfd) -> Vec<u8> {
    let mut w = W(Writer::new(Vec::with_capacity(1024)));
    write_tfd(&mut w, t);
    w.0.into_inner()
}
