//! What the representación impresa shows, read from the stamped XML alone (never from the
//! database or the frozen request), so any stored CFDI renders again identically.

use crate::cfdi::cadena::{cadena_tfd, find_tfd};
use crate::cfdi::dom::{Element, NS_CFDI, NS_PAGOS20};
use crate::pac::sat::StatusQuery;

/// A stamped CFDI, as printed.
#[derive(Debug, Clone)]
pub struct Printable {
    pub titulo: &'static str,
    pub serie_folio: String,
    pub uuid: String,
    pub fecha: String,
    pub lugar_expedicion: String,
    pub emisor: Party,
    pub receptor: Party,
    /// Comprobante attributes in print order, label → value (absent ones left out).
    pub comprobante: Vec<(&'static str, String)>,
    pub informacion_global: Option<String>,
    pub relacionados: Vec<String>,
    pub conceptos: Vec<Concepto>,
    pub totales: Vec<(String, String)>,
    pub moneda: String,
    pub pagos: Vec<Pago>,
    pub timbre: Vec<(&'static str, String)>,
    pub sello_cfd: String,
    pub sello_sat: String,
    pub cadena_tfd: String,
    /// The SAT verification URL the QR encodes.
    pub qr_url: String,
}

#[derive(Debug, Clone)]
pub struct Party {
    pub rfc: String,
    pub nombre: String,
    /// Régimen, CP, uso, residencia: label → value.
    pub datos: Vec<(&'static str, String)>,
}

#[derive(Debug, Clone)]
pub struct Concepto {
    pub clave: String,
    pub no_identificacion: String,
    pub cantidad: String,
    pub unidad: String,
    pub descripcion: String,
    pub valor_unitario: String,
    pub descuento: String,
    pub importe: String,
    /// ObjetoImp and one line per tax (traslado or retención).
    pub impuestos: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Pago {
    pub linea: String,
    pub documentos: Vec<String>,
}

/// Why a document cannot be printed.
#[derive(Debug, thiserror::Error)]
pub enum PrintError {
    #[error("the XML cannot be read: {0}")]
    Xml(String),
    #[error("the CFDI is not stamped (it has no TimbreFiscalDigital): only stamped CFDI print")]
    NotStamped,
}

fn a(e: &Element, k: &str) -> String {
    e.attr(k).unwrap_or_default().to_owned()
}

fn push(out: &mut Vec<(&'static str, String)>, label: &'static str, v: Option<&str>) {
    if let Some(v) = v.filter(|v| !v.is_empty()) {
        out.push((label, v.to_owned()));
    }
}

fn tipo(code: &str) -> (&'static str, &'static str) {
    match code {
        "I" => ("Factura", "I - Ingreso"),
        "E" => ("Nota de crédito", "E - Egreso"),
        "P" => ("Recibo electrónico de pago", "P - Pago"),
        "T" => ("Traslado", "T - Traslado"),
        "N" => ("Recibo de nómina", "N - Nómina"),
        _ => ("CFDI", "?"),
    }
}

impl Printable {
    /// Reads everything the representación impresa needs out of `xml`.
    pub fn from_xml(xml: &[u8]) -> Result<Printable, PrintError> {
        let root = Element::parse(xml).map_err(|e| PrintError::Xml(e.to_string()))?;
        let tfd = find_tfd(&root).ok_or(PrintError::NotStamped)?;
        let query = StatusQuery::from_stamped_xml(xml).map_err(PrintError::Xml)?;
        let code = a(&root, "TipoDeComprobante");
        let (titulo, tipo_label) = tipo(&code);
        let tipo_value = if tipo_label == "?" {
            code.clone()
        } else {
            tipo_label.to_owned()
        };
        let serie_folio = match (root.attr("Serie"), root.attr("Folio")) {
            (Some(s), Some(f)) => format!("{s}-{f}"),
            (None, Some(f)) => f.to_owned(),
            (Some(s), None) => s.to_owned(),
            (None, None) => String::new(),
        };
        let emisor = root.child(NS_CFDI, "Emisor");
        let receptor = root.child(NS_CFDI, "Receptor");
        let party = |e: Option<&Element>, receptor: bool| {
            let Some(e) = e else {
                return Party {
                    rfc: String::new(),
                    nombre: String::new(),
                    datos: Vec::new(),
                };
            };
            let mut datos = Vec::new();
            if receptor {
                push(
                    &mut datos,
                    "Régimen fiscal",
                    e.attr("RegimenFiscalReceptor"),
                );
                push(
                    &mut datos,
                    "Domicilio fiscal (CP)",
                    e.attr("DomicilioFiscalReceptor"),
                );
                push(&mut datos, "Uso CFDI", e.attr("UsoCFDI"));
                push(&mut datos, "Residencia fiscal", e.attr("ResidenciaFiscal"));
                push(&mut datos, "NumRegIdTrib", e.attr("NumRegIdTrib"));
            } else {
                push(&mut datos, "Régimen fiscal", e.attr("RegimenFiscal"));
                push(
                    &mut datos,
                    "Lugar de expedición (CP)",
                    root.attr("LugarExpedicion"),
                );
                push(&mut datos, "FacAtrAdquirente", e.attr("FacAtrAdquirente"));
            }
            Party {
                rfc: a(e, "Rfc"),
                nombre: a(e, "Nombre"),
                datos,
            }
        };
        let mut comprobante = Vec::new();
        comprobante.push(("Tipo de comprobante", tipo_value));
        for (label, key) in [
            ("Exportación", "Exportacion"),
            ("Método de pago", "MetodoPago"),
            ("Forma de pago", "FormaPago"),
            ("Moneda", "Moneda"),
            ("Tipo de cambio", "TipoCambio"),
            ("Condiciones de pago", "CondicionesDePago"),
        ] {
            push(&mut comprobante, label, root.attr(key));
        }
        let informacion_global = root.child(NS_CFDI, "InformacionGlobal").map(|g| {
            format!(
                "Periodicidad {}, meses {}, año {}",
                a(g, "Periodicidad"),
                a(g, "Meses"),
                a(g, "Año")
            )
        });
        let relacionados = root
            .children_named(NS_CFDI, "CfdiRelacionados")
            .map(|r| {
                let uuids: Vec<String> = r
                    .children_named(NS_CFDI, "CfdiRelacionado")
                    .map(|c| a(c, "UUID"))
                    .collect();
                format!(
                    "Tipo de relación {}: {}",
                    a(r, "TipoRelacion"),
                    uuids.join(", ")
                )
            })
            .collect();
        let conceptos = root
            .path(NS_CFDI, &["Conceptos", "Concepto"])
            .into_iter()
            .map(concepto)
            .collect();
        let moneda = a(&root, "Moneda");
        let totales = totales(&root);
        let pagos = pagos(&root);
        let mut timbre = Vec::new();
        push(&mut timbre, "Folio fiscal (UUID)", tfd.attr("UUID"));
        push(
            &mut timbre,
            "Fecha de certificación",
            tfd.attr("FechaTimbrado"),
        );
        push(
            &mut timbre,
            "No. certificado del SAT",
            tfd.attr("NoCertificadoSAT"),
        );
        push(
            &mut timbre,
            "RFC del proveedor de certificación",
            tfd.attr("RfcProvCertif"),
        );
        push(
            &mut timbre,
            "No. certificado del emisor",
            root.attr("NoCertificado"),
        );
        push(&mut timbre, "Leyenda", tfd.attr("Leyenda"));
        Ok(Printable {
            titulo,
            serie_folio,
            uuid: query.uuid.clone(),
            fecha: a(&root, "Fecha"),
            lugar_expedicion: a(&root, "LugarExpedicion"),
            emisor: party(emisor, false),
            receptor: party(receptor, true),
            comprobante,
            informacion_global,
            relacionados,
            conceptos,
            totales,
            moneda,
            pagos,
            timbre,
            sello_cfd: a(&root, "Sello"),
            sello_sat: a(tfd, "SelloSAT"),
            cadena_tfd: cadena_tfd(tfd),
            qr_url: query.expression(),
        })
    }
}

fn tax_line(kind: &str, t: &Element) -> String {
    let mut s = format!("{kind} {}", a(t, "Impuesto"));
    if let Some(f) = t.attr("TipoFactor") {
        s.push_str(&format!(" {f}"));
    }
    if let Some(q) = t.attr("TasaOCuota") {
        s.push_str(&format!(" {q}"));
    }
    if let Some(b) = t.attr("Base") {
        s.push_str(&format!(" base {b}"));
    }
    if let Some(i) = t.attr("Importe") {
        s.push_str(&format!(" importe {i}"));
    }
    s
}

fn concepto(c: &Element) -> Concepto {
    let mut impuestos = vec![format!("Objeto de impuesto {}", a(c, "ObjetoImp"))];
    if let Some(imp) = c.child(NS_CFDI, "Impuestos") {
        for t in imp.path(NS_CFDI, &["Traslados", "Traslado"]) {
            impuestos.push(tax_line("Traslado", t));
        }
        for t in imp.path(NS_CFDI, &["Retenciones", "Retencion"]) {
            impuestos.push(tax_line("Retención", t));
        }
    }
    for cp in c.children_named(NS_CFDI, "CuentaPredial") {
        impuestos.push(format!("Cuenta predial {}", a(cp, "Numero")));
    }
    Concepto {
        clave: a(c, "ClaveProdServ"),
        no_identificacion: a(c, "NoIdentificacion"),
        cantidad: a(c, "Cantidad"),
        unidad: match c.attr("Unidad") {
            Some(u) => format!("{} {u}", a(c, "ClaveUnidad")),
            None => a(c, "ClaveUnidad"),
        },
        descripcion: a(c, "Descripcion"),
        valor_unitario: a(c, "ValorUnitario"),
        descuento: a(c, "Descuento"),
        importe: a(c, "Importe"),
        impuestos,
    }
}

fn totales(root: &Element) -> Vec<(String, String)> {
    let mut out = vec![("Subtotal".to_owned(), a(root, "SubTotal"))];
    if let Some(d) = root.attr("Descuento") {
        out.push(("Descuento".into(), d.to_owned()));
    }
    if let Some(imp) = root.child(NS_CFDI, "Impuestos") {
        for t in imp.path(NS_CFDI, &["Traslados", "Traslado"]) {
            let label = match (t.attr("Impuesto"), t.attr("TasaOCuota")) {
                (Some("002"), Some(q)) => format!("IVA trasladado {q}"),
                (Some("003"), Some(q)) => format!("IEPS trasladado {q}"),
                (Some(i), Some(q)) => format!("Traslado {i} {q}"),
                (Some(i), None) => format!("Traslado {i} {}", a(t, "TipoFactor")),
                _ => "Traslado".into(),
            };
            out.push((label, t.attr("Importe").unwrap_or("—").to_owned()));
        }
        for r in imp.path(NS_CFDI, &["Retenciones", "Retencion"]) {
            let label = match r.attr("Impuesto") {
                Some("001") => "ISR retenido".to_owned(),
                Some("002") => "IVA retenido".to_owned(),
                Some(i) => format!("Retención {i}"),
                None => "Retención".into(),
            };
            out.push((label, a(r, "Importe")));
        }
    }
    out.push(("Total".into(), a(root, "Total")));
    out
}

fn pagos(root: &Element) -> Vec<Pago> {
    let Some(comp) = root.child(NS_CFDI, "Complemento") else {
        return Vec::new();
    };
    comp.children_named(NS_PAGOS20, "Pagos")
        .flat_map(|p| p.children_named(NS_PAGOS20, "Pago"))
        .map(|p| Pago {
            linea: format!(
                "Pago {} forma {} {} {} (tipo de cambio {})",
                a(p, "FechaPago"),
                a(p, "FormaDePagoP"),
                a(p, "Monto"),
                a(p, "MonedaP"),
                p.attr("TipoCambioP").unwrap_or("1")
            ),
            documentos: p
                .children_named(NS_PAGOS20, "DoctoRelacionado")
                .map(|d| {
                    format!(
                        "Documento {} {}{} parcialidad {}: saldo anterior {}, pagado {}, saldo insoluto {} ({})",
                        a(d, "IdDocumento"),
                        d.attr("Serie").map(|s| format!("{s}-")).unwrap_or_default(),
                        a(d, "Folio"),
                        a(d, "NumParcialidad"),
                        a(d, "ImpSaldoAnt"),
                        a(d, "ImpPagado"),
                        a(d, "ImpSaldoInsoluto"),
                        a(d, "MonedaDR"),
                    )
                })
                .collect(),
        })
        .collect()
}
