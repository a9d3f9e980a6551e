//! What an ARCA voucher is, without I/O: the voucher types, the buyer's document, amounts in
//! pesos (`rust_decimal`), IVA per alícuota, the CAE, and the checks WSFEv1 applies to a
//! `FECAEDetRequest` ([`VoucherInput::problems`]), shared by the client (nothing invalid is
//! reserved) and the sandbox (which answers them with ARCA's codes).

use chrono::NaiveDate;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// ARCA's error codes the appliance and the sandbox use. Codes marked *(sandbox)* are the
/// sandbox's choice for a check whose exact code the manual was not at hand for; the real
/// service may report another one (docs/arca.md lists them as to verify in homologación).
pub mod codes {
    /// Not found (`FECompConsultar` on an empty number).
    pub const NOT_FOUND: i32 = 602;
    /// Token or Sign missing or not valid *(sandbox)*.
    pub const AUTH: i32 = 600;
    /// `CantReg` outside 1..9998.
    pub const CANT_REG: i32 = 10001;
    /// `CantReg` is not the number of `FECAEDetRequest` sent.
    pub const CANT_REG_DETAILS: i32 = 10002;
    /// More vouchers than `FECompTotXRequest` allows in one request (FCE: 1).
    pub const CANT_REG_MAX: i32 = 10003;
    /// The number or date is not the next to authorize.
    pub const NOT_NEXT: i32 = 10016;
    /// DocTipo / DocNro not valid for the voucher type or amount.
    pub const DOCUMENT: i32 = 10015;
    /// Class A needs a CUIT (DocTipo 80) *(sandbox)*.
    pub const CLASS_A_NEEDS_CUIT: i32 = 10013;
    /// ImpTotal is not the sum of its parts *(sandbox)*.
    pub const TOTAL: i32 = 10048;
    /// Σ AlicIva.Importe ≠ ImpIVA, or IVA without its block *(sandbox)*.
    pub const IVA_SUM: i32 = 10051;
    /// Σ AlicIva.BaseImp ≠ ImpNeto.
    pub const IVA_BASE: i32 = 10061;
    /// Class C carries no IVA *(sandbox)*.
    pub const CLASS_C_IVA: i32 = 10071;
    /// CondicionIVAReceptorId not in ARCA's catalog (`FEParamGetCondicionIvaReceptor`).
    pub const CONDICION_IVA_INVALID: i32 = 10242;
    /// CondicionIVAReceptorId not valid for the class.
    pub const CONDICION_IVA: i32 = 10243;
    /// CondicionIVAReceptorId missing (mandatory under RG 5616).
    pub const CONDICION_IVA_MISSING: i32 = 10246;
    /// A nota de crédito without `CbtesAsoc` *(sandbox)*.
    pub const CBTES_ASOC_MISSING: i32 = 10151;
    /// A `CbteAsoc` naming no authorized voucher of the emisor *(sandbox)*.
    pub const CBTE_ASOC_NOT_FOUND: i32 = 10153;
    /// MonCotiz must be 1 for PES *(sandbox)*.
    pub const COTIZACION: i32 = 10119;
    /// CbteFch outside the window around today (5 days for products, 10 for services)
    /// *(sandbox)*.
    pub const DATE_WINDOW: i32 = 10017;
    /// Services without their period and payment due date *(sandbox)*.
    pub const SERVICE_DATES: i32 = 10036;
}

/// ARCA's limit for a consumidor final without identification: a voucher of this total or more
/// names its buyer (RG 5700/2025). What the sandbox enforces; the appliance holds sales from
/// `[arca] anonymous_limit`, which follows it when ARCA moves it.
pub const ANONYMOUS_LIMIT: Decimal = Decimal::from_parts(10_000_000, 0, 0, false, 0);

/// Homologación or producción: a sequence and a ticket belong to one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Environment {
    // Spanish spells them with an accent; either spelling is taken.
    #[serde(alias = "homologación")]
    Homologacion,
    #[serde(alias = "producción")]
    Produccion,
}

impl Environment {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Homologacion => "homologacion",
            Self::Produccion => "produccion",
        }
    }
}

/// The voucher types issued: facturas and the notas de crédito that credit them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CbteTipo {
    FacturaA,
    FacturaB,
    FacturaC,
    NotaCreditoA,
    NotaCreditoB,
    NotaCreditoC,
}

impl CbteTipo {
    const ALL: [Self; 6] = [
        Self::FacturaA,
        Self::FacturaB,
        Self::FacturaC,
        Self::NotaCreditoA,
        Self::NotaCreditoB,
        Self::NotaCreditoC,
    ];

    pub fn code(self) -> i32 {
        match self {
            Self::FacturaA => 1,
            Self::FacturaB => 6,
            Self::FacturaC => 11,
            Self::NotaCreditoA => 3,
            Self::NotaCreditoB => 8,
            Self::NotaCreditoC => 13,
        }
    }

    pub fn from_code(code: i32) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.code() == code)
    }

    pub fn class(self) -> char {
        match self {
            Self::FacturaA | Self::NotaCreditoA => 'A',
            Self::FacturaB | Self::NotaCreditoB => 'B',
            Self::FacturaC | Self::NotaCreditoC => 'C',
        }
    }

    pub fn is_credit_note(self) -> bool {
        matches!(
            self,
            Self::NotaCreditoA | Self::NotaCreditoB | Self::NotaCreditoC
        )
    }

    /// Whether several of this type may go in one `FECAESolicitar`: every CAE type may, up to
    /// `FECompTotXRequest`'s count, except the FCE MiPyMEs types (201 to 213, one per
    /// request, error 10003), which this appliance does not issue.
    pub fn batchable(self) -> bool {
        match self {
            Self::FacturaA
            | Self::FacturaB
            | Self::FacturaC
            | Self::NotaCreditoA
            | Self::NotaCreditoB
            | Self::NotaCreditoC => true,
        }
    }

    /// The nota de crédito of a factura's class (itself for a nota de crédito): its own
    /// sequence.
    pub fn credit_note(self) -> Self {
        match self.class() {
            'A' => Self::NotaCreditoA,
            'B' => Self::NotaCreditoB,
            _ => Self::NotaCreditoC,
        }
    }

    /// As printed: `Factura B`, `Nota de Crédito B`.
    pub fn name(self) -> String {
        let kind = if self.is_credit_note() {
            "Nota de Crédito"
        } else {
            "Factura"
        };
        format!("{kind} {}", self.class())
    }
}

/// The buyer's document type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DocTipo {
    Cuit,
    /// CUIL (86): a person's labour code, same check digit as a CUIT.
    Cuil,
    Dni,
    /// Consumidor final without identification (DocNro 0).
    SinIdentificar,
}

impl DocTipo {
    pub fn code(self) -> i32 {
        match self {
            Self::Cuit => 80,
            Self::Cuil => 86,
            Self::Dni => 96,
            Self::SinIdentificar => 99,
        }
    }

    pub fn from_code(code: i32) -> Option<Self> {
        [Self::Cuit, Self::Cuil, Self::Dni, Self::SinIdentificar]
            .into_iter()
            .find(|t| t.code() == code)
    }
}

/// `Concepto`: what was sold (services need their period).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Concepto {
    Productos,
    Servicios,
    ProductosYServicios,
}

impl Concepto {
    pub fn code(self) -> i32 {
        match self {
            Self::Productos => 1,
            Self::Servicios => 2,
            Self::ProductosYServicios => 3,
        }
    }

    pub fn from_code(code: i32) -> Option<Self> {
        [Self::Productos, Self::Servicios, Self::ProductosYServicios]
            .into_iter()
            .find(|t| t.code() == code)
    }
}

/// IVA rates by their ARCA id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Alicuota {
    Cero,
    DosCinco,
    Cinco,
    DiezCinco,
    Veintiuno,
    VeintiSiete,
}

impl Alicuota {
    pub const ALL: [Self; 6] = [
        Self::Cero,
        Self::DosCinco,
        Self::Cinco,
        Self::DiezCinco,
        Self::Veintiuno,
        Self::VeintiSiete,
    ];

    pub fn id(self) -> i32 {
        match self {
            Self::Cero => 3,
            Self::DiezCinco => 4,
            Self::Veintiuno => 5,
            Self::VeintiSiete => 6,
            Self::Cinco => 8,
            Self::DosCinco => 9,
        }
    }

    pub fn from_id(id: i32) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.id() == id)
    }

    /// The rate as a fraction (21 % → 0.21).
    pub fn rate(self) -> Decimal {
        let per_mille = match self {
            Self::Cero => 0,
            Self::DosCinco => 25,
            Self::Cinco => 50,
            Self::DiezCinco => 105,
            Self::Veintiuno => 210,
            Self::VeintiSiete => 270,
        };
        Decimal::new(per_mille, 3)
    }
}

/// One `AlicIva`: the base taxed at one rate and its IVA.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlicIva {
    pub alicuota: Alicuota,
    pub base_imp: Decimal,
    pub importe: Decimal,
}

/// What a sale determines of its voucher: everything but the number and the date, which the
/// sequence assigns when the number is reserved. Its hash is what an idempotency key is bound
/// to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VoucherInput {
    pub concepto: Concepto,
    pub doc_tipo: DocTipo,
    pub doc_nro: i64,
    pub imp_total: Decimal,
    pub imp_tot_conc: Decimal,
    pub imp_neto: Decimal,
    pub imp_op_ex: Decimal,
    pub imp_trib: Decimal,
    pub imp_iva: Decimal,
    /// Service period and payment due date: only with `Concepto` 2 or 3.
    pub fch_serv_desde: Option<NaiveDate>,
    pub fch_serv_hasta: Option<NaiveDate>,
    pub fch_vto_pago: Option<NaiveDate>,
    /// ARCA's currency id (`PES`, `DOL`, …; not ISO).
    pub mon_id: String,
    pub mon_cotiz: Decimal,
    /// The buyer's IVA condition (1 RI, 4 exento, 5 consumidor final, 6 monotributo, …).
    pub condicion_iva_receptor: i32,
    pub iva: Vec<AlicIva>,
    /// The vouchers a nota de crédito credits (`CbtesAsoc`); none on a factura, and then not
    /// serialized, so a factura's hash is what it was before notas de crédito existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cbtes_asoc: Vec<CbteAsoc>,
}

/// One `CbteAsoc`: the voucher a nota de crédito credits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CbteAsoc {
    /// Its `CbteTipo` code.
    pub tipo: i32,
    pub pto_vta: i32,
    pub nro: i64,
    /// The CUIT of its emisor.
    pub cuit: i64,
    pub cbte_fch: NaiveDate,
}

/// `CondicionIVAReceptorId`s of ARCA's catalog (`FEParamGetCondicionIvaReceptor`, RG 5616)
/// that class A takes: RI, monotributo, monotributista social, monotributo trabajador
/// independiente promovido.
pub const CONDICIONES_CLASE_A: [i32; 4] = [1, 6, 13, 16];
/// Those class B takes: exento, consumidor final, no categorizado, proveedor and cliente del
/// exterior, IVA liberado (Ley 19.640), IVA no alcanzado. Class C takes all of both.
pub const CONDICIONES_CLASE_B: [i32; 7] = [4, 5, 7, 8, 9, 10, 15];

/// One of ARCA's `Err` or `Obs`: a code and its message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub code: i32,
    pub msg: String,
}

impl Message {
    pub fn new(code: i32, msg: impl Into<String>) -> Self {
        Self {
            code,
            msg: msg.into(),
        }
    }
}

impl std::fmt::Display for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.msg)
    }
}

/// The authorization: a 14-digit CAE and the date it expires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cae {
    pub code: String,
    pub due: NaiveDate,
}

/// Whether `cuit` is 11 digits with a valid check digit (mod 11, weights 5432765432).
pub fn valid_cuit(cuit: i64) -> bool {
    if !(10_000_000_000..100_000_000_000).contains(&cuit) {
        return false;
    }
    let digits: Vec<i64> = cuit
        .to_string()
        .bytes()
        .map(|b| i64::from(b - b'0'))
        .collect();
    let weights = [5, 4, 3, 2, 7, 6, 5, 4, 3, 2];
    let sum: i64 = weights.iter().zip(&digits).map(|(w, d)| w * d).sum();
    let check = match 11 - sum % 11 {
        11 => 0,
        10 => 9,
        c => c,
    };
    digits[10] == check
}

impl VoucherInput {
    /// A sale of products in pesos to a consumidor final without identification, `total`
    /// including IVA at one `alicuota` (the common Mercado Pago sale, Factura B).
    pub fn consumidor_final(total: Decimal, alicuota: Alicuota) -> Self {
        let neto = (total / (Decimal::ONE + alicuota.rate())).round_dp(2);
        VoucherInput {
            concepto: Concepto::Productos,
            doc_tipo: DocTipo::SinIdentificar,
            doc_nro: 0,
            imp_total: total,
            imp_tot_conc: Decimal::ZERO,
            imp_neto: neto,
            imp_op_ex: Decimal::ZERO,
            imp_trib: Decimal::ZERO,
            imp_iva: total - neto,
            fch_serv_desde: None,
            fch_serv_hasta: None,
            fch_vto_pago: None,
            mon_id: "PES".into(),
            mon_cotiz: Decimal::ONE,
            condicion_iva_receptor: 5,
            iva: vec![AlicIva {
                alicuota,
                base_imp: neto,
                importe: total - neto,
            }],
            cbtes_asoc: Vec::new(),
        }
    }

    /// What `c` pesos of this voucher's `imp_total` stand for: every amount scaled by
    /// `c / imp_total` to the centavo, the rounding's centavos on the last IVA line (else on
    /// ImpNeto), so the parts add up to exactly `c`, the IVA lines to ImpIVA and their bases
    /// to ImpNeto.
    fn share(&self, c: Decimal) -> VoucherInput {
        let mut out = self.clone();
        out.cbtes_asoc.clear();
        if c == self.imp_total || self.imp_total.is_zero() {
            return out;
        }
        let scale = |x: Decimal| (x * c / self.imp_total).round_dp(2);
        out.imp_total = c;
        out.imp_tot_conc = scale(self.imp_tot_conc);
        out.imp_op_ex = scale(self.imp_op_ex);
        out.imp_trib = scale(self.imp_trib);
        for a in &mut out.iva {
            a.base_imp = scale(a.base_imp);
            a.importe = scale(a.importe);
        }
        out.imp_neto = if out.iva.is_empty() {
            scale(self.imp_neto)
        } else {
            out.iva.iter().map(|a| a.base_imp).sum()
        };
        out.imp_iva = out.iva.iter().map(|a| a.importe).sum();
        let parts = out.imp_tot_conc + out.imp_neto + out.imp_op_ex + out.imp_trib + out.imp_iva;
        match out.iva.last_mut() {
            Some(last) => {
                last.importe += c - parts;
                out.imp_iva += c - parts;
            }
            None => out.imp_neto += c - parts,
        }
        out
    }

    /// The amounts of a nota de crédito for `amount` more pesos of this voucher, `before`
    /// having been credited already: cumulative shares (`share(before + amount) −
    /// share(before)`), so the notas of a voucher credited in any number of steps add up, field
    /// by field and to the centavo, to the voucher itself. `cbtes_asoc` is left for the caller.
    pub fn credited(&self, before: Decimal, amount: Decimal) -> VoucherInput {
        let (to, from) = (self.share(before + amount), self.share(before));
        let mut out = to.clone();
        out.imp_total = to.imp_total - from.imp_total;
        out.imp_tot_conc = to.imp_tot_conc - from.imp_tot_conc;
        out.imp_neto = to.imp_neto - from.imp_neto;
        out.imp_op_ex = to.imp_op_ex - from.imp_op_ex;
        out.imp_trib = to.imp_trib - from.imp_trib;
        out.imp_iva = to.imp_iva - from.imp_iva;
        for (a, f) in out.iva.iter_mut().zip(&from.iva) {
            a.base_imp -= f.base_imp;
            a.importe -= f.importe;
        }
        out
    }

    /// SHA-256 of the canonical JSON: an idempotency key reused with another input differs.
    pub fn hash(&self) -> String {
        let json = serde_json::to_vec(self).expect("a voucher input serializes");
        hex::encode(Sha256::digest(json))
    }

    /// What WSFEv1 refuses in this input for a voucher of type `tipo`: amounts, IVA sums and
    /// the document rules of each class. Empty when it would pass.
    pub fn problems(&self, tipo: CbteTipo) -> Vec<Message> {
        let mut out = Vec::new();
        let parts =
            self.imp_tot_conc + self.imp_neto + self.imp_op_ex + self.imp_trib + self.imp_iva;
        if self.imp_total != parts {
            out.push(Message::new(
                codes::TOTAL,
                format!(
                    "El campo ImpTotal ({}) debe ser igual a la suma de ImpTotConc + ImpNeto + \
                     ImpOpEx + ImpTrib + ImpIVA ({parts})",
                    self.imp_total
                ),
            ));
        }
        let iva: Decimal = self.iva.iter().map(|a| a.importe).sum();
        let bases: Decimal = self.iva.iter().map(|a| a.base_imp).sum();
        if tipo.class() == 'C' {
            if !self.imp_iva.is_zero() || !self.iva.is_empty() {
                out.push(Message::new(
                    codes::CLASS_C_IVA,
                    "Para comprobantes clase C ImpIVA debe ser 0 y no debe informarse el objeto Iva",
                ));
            }
        } else {
            if iva != self.imp_iva || (self.imp_iva > Decimal::ZERO && self.iva.is_empty()) {
                out.push(Message::new(
                    codes::IVA_SUM,
                    format!(
                        "La suma de los importes de AlicIva ({iva}) debe ser igual a ImpIVA ({})",
                        self.imp_iva
                    ),
                ));
            }
            if bases != self.imp_neto {
                out.push(Message::new(
                    codes::IVA_BASE,
                    format!(
                        "La suma de las bases imponibles de AlicIva ({bases}) debe ser igual a \
                         ImpNeto ({})",
                        self.imp_neto
                    ),
                ));
            }
        }
        out.extend(self.document_problems(tipo));
        if tipo.is_credit_note() && self.cbtes_asoc.is_empty() {
            out.push(Message::new(
                codes::CBTES_ASOC_MISSING,
                "Para notas de credito es obligatorio informar CbtesAsoc",
            ));
        }
        if self.mon_id == "PES" && self.mon_cotiz != Decimal::ONE {
            out.push(Message::new(
                codes::COTIZACION,
                "Para MonId PES, MonCotiz debe ser 1",
            ));
        }
        out
    }

    /// What WSFEv1 refuses in the dates of this input dated `cbte_fch` when it arrives on
    /// `today` (Argentina): CbteFch within 5 days of today for products, 10 for services, and a
    /// service's period and due date present.
    pub fn date_problems(&self, cbte_fch: NaiveDate, today: NaiveDate) -> Vec<Message> {
        let mut out = Vec::new();
        let window = if self.concepto == Concepto::Productos {
            5
        } else {
            10
        };
        if (cbte_fch - today).num_days().abs() > window {
            out.push(Message::new(
                codes::DATE_WINDOW,
                format!("La fecha del comprobante debe estar dentro de los {window} dias de hoy"),
            ));
        }
        let service_dates = [self.fch_serv_desde, self.fch_serv_hasta, self.fch_vto_pago];
        if self.concepto != Concepto::Productos && service_dates.iter().any(Option::is_none) {
            out.push(Message::new(
                codes::SERVICE_DATES,
                "Para Concepto 2 o 3 son obligatorias FchServDesde, FchServHasta y FchVtoPago",
            ));
        }
        out
    }

    fn document_problems(&self, tipo: CbteTipo) -> Vec<Message> {
        let mut out = Vec::new();
        match self.doc_tipo {
            DocTipo::Cuit | DocTipo::Cuil if !valid_cuit(self.doc_nro) => out.push(Message::new(
                codes::DOCUMENT,
                format!(
                    "El numero de {} {} no es valido",
                    if self.doc_tipo == DocTipo::Cuit {
                        "CUIT"
                    } else {
                        "CUIL"
                    },
                    self.doc_nro
                ),
            )),
            DocTipo::Dni if !(1..100_000_000).contains(&self.doc_nro) => out.push(Message::new(
                codes::DOCUMENT,
                format!("El numero de DNI {} no es valido", self.doc_nro),
            )),
            DocTipo::SinIdentificar if self.doc_nro != 0 => out.push(Message::new(
                codes::DOCUMENT,
                "Para DocTipo 99 (sin identificar) DocNro debe ser 0",
            )),
            DocTipo::SinIdentificar if self.imp_total >= ANONYMOUS_LIMIT => {
                out.push(Message::new(
                    codes::DOCUMENT,
                    format!(
                        "Para comprobantes de {ANONYMOUS_LIMIT} o mas debe identificarse al receptor"
                    ),
                ));
            }
            _ => {}
        }
        let c = self.condicion_iva_receptor;
        if !CONDICIONES_CLASE_A.contains(&c) && !CONDICIONES_CLASE_B.contains(&c) {
            out.push(Message::new(
                codes::CONDICION_IVA_INVALID,
                format!(
                    "El campo Condicion IVA receptor ({c}) no es un valor valido. Consultar \
                     metodo FEParamGetCondicionIvaReceptor"
                ),
            ));
            return out;
        }
        match tipo.class() {
            'A' => {
                if self.doc_tipo != DocTipo::Cuit {
                    out.push(Message::new(
                        codes::CLASS_A_NEEDS_CUIT,
                        "Para comprobantes clase A el campo DocTipo debe ser 80 (CUIT)",
                    ));
                }
                if !CONDICIONES_CLASE_A.contains(&c) {
                    out.push(self.condicion_problem('A'));
                }
            }
            'B' if !CONDICIONES_CLASE_B.contains(&c) => out.push(self.condicion_problem('B')),
            _ => {}
        }
        out
    }

    fn condicion_problem(&self, class: char) -> Message {
        Message::new(
            codes::CONDICION_IVA,
            format!(
                "El campo Condicion IVA receptor ({}) no es valido para comprobantes clase {class}",
                self.condicion_iva_receptor
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consumidor_final(cents: i64) -> VoucherInput {
        VoucherInput::consumidor_final(Decimal::new(cents, 2), Alicuota::Veintiuno)
    }

    #[test]
    fn a_consistent_factura_b_to_a_consumidor_final_has_no_problem() {
        assert_eq!(
            consumidor_final(12_100).problems(CbteTipo::FacturaB),
            vec![]
        );
    }

    #[test]
    fn totals_iva_sums_and_class_rules_are_each_reported_with_their_code() {
        let mut v = consumidor_final(12_100);
        v.imp_total += Decimal::ONE;
        v.iva[0].importe -= Decimal::ONE;
        let codes_of =
            |v: &VoucherInput, t| -> Vec<i32> { v.problems(t).iter().map(|m| m.code).collect() };
        assert_eq!(
            codes_of(&v, CbteTipo::FacturaB),
            [codes::TOTAL, codes::IVA_SUM]
        );
        let ok = consumidor_final(12_100);
        assert_eq!(
            codes_of(&ok, CbteTipo::FacturaA),
            [codes::CLASS_A_NEEDS_CUIT, codes::CONDICION_IVA]
        );
        assert_eq!(codes_of(&ok, CbteTipo::FacturaC), [codes::CLASS_C_IVA]);
        let big = consumidor_final(1_000_000_000);
        assert_eq!(codes_of(&big, CbteTipo::FacturaB), [codes::DOCUMENT]);
    }

    #[test]
    fn dates_are_checked_against_arca_s_window() {
        let today = NaiveDate::from_ymd_opt(2026, 12, 4).expect("date");
        let codes_at = |v: &VoucherInput, days| -> Vec<i32> {
            v.date_problems(today + chrono::Duration::days(days), today)
                .iter()
                .map(|m| m.code)
                .collect()
        };
        let mut v = consumidor_final(12_100);
        assert!(codes_at(&v, -5).is_empty());
        assert_eq!(codes_at(&v, -6), [codes::DATE_WINDOW]);
        v.concepto = Concepto::Servicios;
        assert_eq!(codes_at(&v, -6), [codes::SERVICE_DATES]);
        v.fch_serv_desde = Some(today);
        v.fch_serv_hasta = Some(today);
        v.fch_vto_pago = Some(today);
        assert!(codes_at(&v, 10).is_empty());
        assert_eq!(codes_at(&v, 11), [codes::DATE_WINDOW]);
    }

    #[test]
    fn cuit_check_digits_are_verified() {
        assert!(valid_cuit(20_267_565_393));
        assert!(valid_cuit(30_000_000_007));
        assert!(!valid_cuit(20_267_565_394));
        assert!(!valid_cuit(2_026_756_539));
    }

    #[test]
    fn notas_de_credito_in_any_steps_add_up_to_the_voucher_field_by_field() {
        let asoc = CbteAsoc {
            tipo: 6,
            pto_vta: 3,
            nro: 1,
            cuit: 20_111_111_112,
            cbte_fch: NaiveDate::from_ymd_opt(2026, 12, 4).expect("date"),
        };
        let b = consumidor_final(121_000);
        let mut c = b.clone();
        (c.imp_neto, c.imp_iva) = (c.imp_total, Decimal::ZERO);
        c.iva.clear();
        for (sale, tipo) in [(b, CbteTipo::NotaCreditoB), (c, CbteTipo::NotaCreditoC)] {
            let steps = [1, 33_333, 12_345, 75_321].map(|cents| Decimal::new(cents, 2));
            assert_eq!(steps.iter().sum::<Decimal>(), sale.imp_total);
            let mut before = Decimal::ZERO;
            let mut notas = Vec::new();
            for a in steps {
                let mut nc = sale.credited(before, a);
                nc.cbtes_asoc = vec![asoc.clone()];
                assert_eq!(nc.imp_total, a);
                assert_eq!(nc.problems(tipo), vec![], "{nc:?}");
                assert!(nc.imp_neto >= Decimal::ZERO && nc.imp_iva >= Decimal::ZERO);
                before += a;
                notas.push(nc);
            }
            let sum = |f: fn(&VoucherInput) -> Decimal| notas.iter().map(f).sum::<Decimal>();
            assert_eq!(sum(|n| n.imp_neto), sale.imp_neto);
            assert_eq!(sum(|n| n.imp_iva), sale.imp_iva);
            // Without CbtesAsoc a nota de crédito is refused.
            let bare = sale.credited(Decimal::ZERO, Decimal::ONE);
            assert!(
                bare.problems(tipo)
                    .iter()
                    .any(|m| m.code == codes::CBTES_ASOC_MISSING)
            );
        }
    }

    #[test]
    fn the_hash_changes_with_any_amount() {
        let a = consumidor_final(12_100);
        let mut b = a.clone();
        b.imp_trib += Decimal::new(1, 2);
        assert_ne!(a.hash(), b.hash());
        assert_eq!(a.hash(), consumidor_final(12_100).hash());
    }
}
