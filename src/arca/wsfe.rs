//! The WSFEv1 client: SOAP 1.1 over reqwest (docs/arca.md §3). `FECompUltimoAutorizado`,
//! `FECAESolicitar` (one voucher or a batch of one sequence's consecutive numbers, no transport
//! retry: a retry is the caller's decision, after consulting), `FECompTotXRequest` and `FECompConsultar`, each answer turned into one unambiguous value; the
//! envelopes are also what the sandbox parses ([`crate::arcasim`]).

use std::time::Duration;

use chrono::NaiveDate;
use rust_decimal::Decimal;

use super::model::{Cae, CbteTipo, Message, VoucherInput, codes};
use crate::cfdi::dom::Element;

pub const NS: &str = "http://ar.gov.afip.dif.FEV1/";

/// `Auth`: the WSAA ticket's token and sign, and the represented CUIT.
#[derive(Clone)]
pub struct Auth {
    pub token: String,
    pub sign: String,
    pub cuit: i64,
}

/// The token and sign are credentials: never printed.
impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth").field("cuit", &self.cuit).finish()
    }
}

/// One voucher as sent: the sale's input at its reserved number and date.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub pto_vta: i32,
    pub cbte_tipo: CbteTipo,
    pub number: i64,
    pub cbte_fch: NaiveDate,
    pub input: VoucherInput,
}

/// What `FECompConsultar` found at a number: the fields that identify a voucher, and its CAE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub doc_tipo: i32,
    pub doc_nro: i64,
    pub cbte_fch: String,
    pub imp_total: Decimal,
    pub imp_neto: Decimal,
    pub imp_iva: Decimal,
    pub imp_trib: Decimal,
    pub imp_op_ex: Decimal,
    pub imp_tot_conc: Decimal,
    pub mon_id: String,
    pub cae: Cae,
}

impl Found {
    /// Whether this is the voucher `req` asked for (amounts compared as numbers: ARCA echoes
    /// `122`, not `122.00`). A match proves consistency, not authorship; it is used only on a
    /// number this appliance reserved for `req`.
    pub fn matches(&self, req: &Request) -> bool {
        let i = &req.input;
        self.doc_tipo == i.doc_tipo.code()
            && self.doc_nro == i.doc_nro
            && self.cbte_fch == yyyymmdd(req.cbte_fch)
            && self.imp_total == i.imp_total
            && self.imp_neto == i.imp_neto
            && self.imp_iva == i.imp_iva
            && self.imp_trib == i.imp_trib
            && self.imp_op_ex == i.imp_op_ex
            && self.imp_tot_conc == i.imp_tot_conc
            && self.mon_id == i.mon_id
    }
}

/// `FECAESolicitar`'s answer for one voucher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Solicit {
    Approved {
        cae: Cae,
        observations: Vec<Message>,
    },
    Rejected {
        errors: Vec<Message>,
        observations: Vec<Message>,
    },
}

/// A call that did not produce an answer to trust. Whether a `FECAESolicitar` that failed
/// this way reached ARCA is unknown: only consulting its number tells.
#[derive(Debug, thiserror::Error)]
pub enum WsfeError {
    #[error("no answer from WSFEv1: {0}")]
    Transport(String),
    #[error("WSFEv1 answered HTTP {0}: {1}")]
    Status(u16, String),
    #[error("WSFEv1 SOAP fault: {0}")]
    Fault(String),
    #[error("WSFEv1 answer not understood: {0}")]
    Malformed(String),
    /// Result-level `Errors` (authentication, a bad parameter): the call was refused whole.
    #[error("WSFEv1 refused the call: {}", join(.0))]
    Refused(Vec<Message>),
}

fn join(m: &[Message]) -> String {
    m.iter()
        .map(Message::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The client of one WSFEv1 endpoint.
#[derive(Debug, Clone)]
pub struct Wsfe {
    http: reqwest::Client,
    url: String,
    auth: Auth,
}

pub fn yyyymmdd(d: NaiveDate) -> String {
    d.format("%Y%m%d").to_string()
}

fn amount(d: Decimal) -> String {
    format!("{:.2}", d.round_dp(2))
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The SOAP envelope of operation `op` with `body` inside it.
pub fn envelope(op: &str, body: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
         <soap:Envelope xmlns:soap=\"http://schemas.xmlsoap.org/soap/envelope/\">\
         <soap:Header/><soap:Body><{op} xmlns=\"{NS}\">{body}</{op}></soap:Body></soap:Envelope>"
    )
}

fn auth_xml(a: &Auth) -> String {
    format!(
        "<Auth><Token>{}</Token><Sign>{}</Sign><Cuit>{}</Cuit></Auth>",
        escape(&a.token),
        escape(&a.sign),
        a.cuit
    )
}

/// `FECAEDetRequest` in the WSDL's element order.
pub fn detail_xml(r: &Request) -> String {
    let i = &r.input;
    let mut x = format!(
        "<FECAEDetRequest><Concepto>{}</Concepto><DocTipo>{}</DocTipo><DocNro>{}</DocNro>\
         <CbteDesde>{n}</CbteDesde><CbteHasta>{n}</CbteHasta><CbteFch>{}</CbteFch>\
         <ImpTotal>{}</ImpTotal><ImpTotConc>{}</ImpTotConc><ImpNeto>{}</ImpNeto>\
         <ImpOpEx>{}</ImpOpEx><ImpTrib>{}</ImpTrib><ImpIVA>{}</ImpIVA>",
        i.concepto.code(),
        i.doc_tipo.code(),
        i.doc_nro,
        yyyymmdd(r.cbte_fch),
        amount(i.imp_total),
        amount(i.imp_tot_conc),
        amount(i.imp_neto),
        amount(i.imp_op_ex),
        amount(i.imp_trib),
        amount(i.imp_iva),
        n = r.number,
    );
    for (tag, d) in [
        ("FchServDesde", i.fch_serv_desde),
        ("FchServHasta", i.fch_serv_hasta),
        ("FchVtoPago", i.fch_vto_pago),
    ] {
        if let Some(d) = d {
            x.push_str(&format!("<{tag}>{}</{tag}>", yyyymmdd(d)));
        }
    }
    x.push_str(&format!(
        "<MonId>{}</MonId><MonCotiz>{}</MonCotiz>\
         <CondicionIVAReceptorId>{}</CondicionIVAReceptorId>",
        escape(&i.mon_id),
        i.mon_cotiz,
        i.condicion_iva_receptor
    ));
    if !i.cbtes_asoc.is_empty() {
        x.push_str("<CbtesAsoc>");
        for a in &i.cbtes_asoc {
            x.push_str(&format!(
                "<CbteAsoc><Tipo>{}</Tipo><PtoVta>{}</PtoVta><Nro>{}</Nro><Cuit>{}</Cuit>\
                 <CbteFch>{}</CbteFch></CbteAsoc>",
                a.tipo,
                a.pto_vta,
                a.nro,
                a.cuit,
                yyyymmdd(a.cbte_fch)
            ));
        }
        x.push_str("</CbtesAsoc>");
    }
    if !i.iva.is_empty() {
        x.push_str("<Iva>");
        for a in &i.iva {
            x.push_str(&format!(
                "<AlicIva><Id>{}</Id><BaseImp>{}</BaseImp><Importe>{}</Importe></AlicIva>",
                a.alicuota.id(),
                amount(a.base_imp),
                amount(a.importe)
            ));
        }
        x.push_str("</Iva>");
    }
    x.push_str("</FECAEDetRequest>");
    x
}

/// The first descendant (or `e` itself) whose local name is `name`, whatever its namespace:
/// ARCA's answers put everything in the default namespace, which the sandbox need not copy.
pub fn find<'a>(e: &'a Element, name: &str) -> Option<&'a Element> {
    if e.name == name {
        return Some(e);
    }
    e.elements().find_map(|c| find(c, name))
}

/// Every descendant named `name`.
pub fn find_all<'a>(e: &'a Element, name: &str, out: &mut Vec<&'a Element>) {
    for c in e.elements() {
        if c.name == name {
            out.push(c);
        } else {
            find_all(c, name, out);
        }
    }
}

/// The trimmed text of the first descendant named `name`, if any and not empty.
pub fn text(e: &Element, name: &str) -> Option<String> {
    find(e, name)
        .map(|c| c.text_content().trim().to_owned())
        .filter(|t| !t.is_empty())
}

pub fn number<T: std::str::FromStr>(e: &Element, name: &str) -> Result<T, String> {
    let t = text(e, name).ok_or_else(|| format!("{name} is missing"))?;
    t.parse()
        .map_err(|_| format!("{name} is not a number: {t}"))
}

/// The `Err`s (or `Obs`s) under the first `list` element of `e`.
pub fn messages(e: &Element, list: &str, item: &str) -> Vec<Message> {
    let Some(l) = find(e, list) else {
        return Vec::new();
    };
    let mut items = Vec::new();
    find_all(l, item, &mut items);
    items
        .into_iter()
        .map(|m| Message {
            code: number(m, "Code").unwrap_or(-1),
            msg: text(m, "Msg").unwrap_or_default(),
        })
        .collect()
}

pub fn parse_date(s: &str) -> Option<NaiveDate> {
    NaiveDate::parse_from_str(s, "%Y%m%d").ok()
}

impl Wsfe {
    /// A client of `url` (the `service.asmx` endpoint) answering within `timeout`.
    pub fn new(url: &str, auth: Auth, timeout: Duration) -> Result<Self, WsfeError> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| WsfeError::Transport(e.to_string()))?;
        Ok(Self {
            http,
            url: url.to_owned(),
            auth,
        })
    }

    pub fn cuit(&self) -> i64 {
        self.auth.cuit
    }

    /// Posts `op` and returns the parsed `<opResult>` element; result-level `Errors` are
    /// returned with it for the caller to weigh (602 is an answer, not a failure).
    async fn call(&self, op: &str, body: &str) -> Result<Element, WsfeError> {
        let started = std::time::Instant::now();
        let r = self.call_once(op, body).await;
        let outcome = match &r {
            Ok(_) => "answered",
            Err(WsfeError::Transport(_)) => "transport",
            Err(WsfeError::Status(..)) => "status",
            Err(WsfeError::Fault(_)) => "fault",
            Err(WsfeError::Malformed(_)) => "malformed",
            Err(WsfeError::Refused(_)) => "refused",
        };
        crate::metrics::arca_request(op, outcome, started.elapsed());
        r
    }

    async fn call_once(&self, op: &str, body: &str) -> Result<Element, WsfeError> {
        let resp = self
            .http
            .post(&self.url)
            .header("content-type", "text/xml; charset=utf-8")
            .header("soapaction", format!("\"{NS}{op}\""))
            .body(envelope(op, &format!("{}{body}", auth_xml(&self.auth))))
            .send()
            .await
            .map_err(|e| WsfeError::Transport(e.to_string()))?;
        let status = resp.status();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| WsfeError::Transport(e.to_string()))?;
        let root = Element::parse(&bytes);
        if let Ok(root) = &root
            && let Some(fault) = find(root, "Fault")
        {
            return Err(WsfeError::Fault(
                text(fault, "faultstring").unwrap_or_else(|| fault.text_content()),
            ));
        }
        if !status.is_success() {
            let body = String::from_utf8_lossy(&bytes).chars().take(200).collect();
            return Err(WsfeError::Status(status.as_u16(), body));
        }
        let root = root.map_err(|e| WsfeError::Malformed(e.to_string()))?;
        let result = format!("{op}Result");
        find(&root, &result)
            .cloned()
            .ok_or_else(|| WsfeError::Malformed(format!("no {result}")))
    }

    /// `FECompUltimoAutorizado`: the last number ARCA authorized on the sequence (0 if none).
    pub async fn last_authorized(&self, pto_vta: i32, tipo: CbteTipo) -> Result<i64, WsfeError> {
        let r = self
            .call(
                "FECompUltimoAutorizado",
                &format!(
                    "<PtoVta>{pto_vta}</PtoVta><CbteTipo>{}</CbteTipo>",
                    tipo.code()
                ),
            )
            .await?;
        let errors = messages(&r, "Errors", "Err");
        if !errors.is_empty() {
            return Err(WsfeError::Refused(errors));
        }
        number(&r, "CbteNro").map_err(WsfeError::Malformed)
    }

    /// `FECompConsultar`: the voucher at a number, `None` on 602.
    pub async fn consult(
        &self,
        pto_vta: i32,
        tipo: CbteTipo,
        nro: i64,
    ) -> Result<Option<Found>, WsfeError> {
        let r = self
            .call(
                "FECompConsultar",
                &format!(
                    "<FeCompConsReq><CbteTipo>{}</CbteTipo><CbteNro>{nro}</CbteNro>\
                     <PtoVta>{pto_vta}</PtoVta></FeCompConsReq>",
                    tipo.code()
                ),
            )
            .await?;
        let errors = messages(&r, "Errors", "Err");
        if errors.iter().any(|e| e.code == codes::NOT_FOUND) {
            return Ok(None);
        }
        if !errors.is_empty() {
            return Err(WsfeError::Refused(errors));
        }
        let g = find(&r, "ResultGet").ok_or_else(|| WsfeError::Malformed("no ResultGet".into()))?;
        parse_found(g).map(Some).map_err(WsfeError::Malformed)
    }

    /// `FEParamGetPtosVenta`: the CUIT's web-services points of sale that issue with CAE and
    /// are not blocked (602: none).
    pub async fn ptos_venta(&self) -> Result<Vec<i32>, WsfeError> {
        let r = self.call("FEParamGetPtosVenta", "").await?;
        let errors = messages(&r, "Errors", "Err");
        if errors.iter().any(|e| e.code == codes::NOT_FOUND) {
            return Ok(Vec::new());
        }
        if !errors.is_empty() {
            return Err(WsfeError::Refused(errors));
        }
        let mut points = Vec::new();
        find_all(&r, "PtoVenta", &mut points);
        Ok(points
            .into_iter()
            .filter(|p| {
                text(p, "EmisionTipo").is_some_and(|t| t.starts_with("CAE"))
                    && text(p, "Bloqueado").as_deref() != Some("S")
            })
            .filter_map(|p| number(p, "Nro").ok())
            .collect())
    }

    /// `FECompTotXRequest`: how many vouchers one `FECAESolicitar` may carry (`RegXReq`).
    pub async fn max_records(&self) -> Result<usize, WsfeError> {
        let r = self.call("FECompTotXRequest", "").await?;
        let errors = messages(&r, "Errors", "Err");
        if !errors.is_empty() {
            return Err(WsfeError::Refused(errors));
        }
        number(&r, "RegXReq").map_err(WsfeError::Malformed)
    }

    /// `FECAESolicitar` for one voucher, sent once (the batch of one).
    pub async fn solicit(&self, req: &Request) -> Result<Solicit, WsfeError> {
        let mut one = self.solicit_many(std::slice::from_ref(req)).await?;
        Ok(one.remove(0))
    }

    /// `FECAESolicitar` for consecutive vouchers of one sequence (`CantReg` = their count),
    /// sent once: one answer per voucher, in order. A failure of any kind leaves all their
    /// outcomes unknown; a header/detail contradiction is malformed, hence unknown too.
    pub async fn solicit_many(&self, reqs: &[Request]) -> Result<Vec<Solicit>, WsfeError> {
        let Some(first) = reqs.first() else {
            return Ok(Vec::new());
        };
        let details: String = reqs.iter().map(detail_xml).collect();
        let body = format!(
            "<FeCAEReq><FeCabReq><CantReg>{}</CantReg><PtoVta>{}</PtoVta><CbteTipo>{}</CbteTipo>\
             </FeCabReq><FeDetReq>{details}</FeDetReq></FeCAEReq>",
            reqs.len(),
            first.pto_vta,
            first.cbte_tipo.code(),
        );
        let r = self.call("FECAESolicitar", &body).await?;
        let numbers: Vec<i64> = reqs.iter().map(|q| q.number).collect();
        parse_batch(&r, &numbers).map_err(WsfeError::Malformed)
    }
}

/// A `FECAESolicitarResult` for number `nro` alone.
#[cfg(test)]
fn parse_solicit(r: &Element, nro: i64) -> Result<Solicit, String> {
    parse_batch(r, &[nro]).map(|mut v| v.remove(0))
}

/// A `FECAESolicitarResult` for `numbers`, one answer each. Result-level `Errors` (the
/// request's: numbering, header) go with every refused voucher, each with its own
/// `Observaciones`; the header's `Resultado` must agree with the details (`A` all approved,
/// `R` none, `P` some).
fn parse_batch(r: &Element, numbers: &[i64]) -> Result<Vec<Solicit>, String> {
    let errors = messages(r, "Errors", "Err");
    let head = find(r, "FeCabResp").and_then(|h| text(h, "Resultado"));
    let mut dets = Vec::new();
    if let Some(d) = find(r, "FeDetResp") {
        find_all(d, "FECAEDetResponse", &mut dets);
    }
    if dets.is_empty() {
        // Refused whole (bad credentials, bad header): nothing was authorized.
        if errors.is_empty() {
            return Err("no FECAEDetResponse".into());
        }
        let refused = Solicit::Rejected {
            errors,
            observations: Vec::new(),
        };
        return Ok(vec![refused; numbers.len()]);
    }
    if dets.len() != numbers.len() {
        return Err(format!(
            "{} FECAEDetResponse for {} vouchers",
            dets.len(),
            numbers.len()
        ));
    }
    let answers = dets
        .iter()
        .zip(numbers)
        .map(|(det, nro)| parse_detail(det, *nro, &errors))
        .collect::<Result<Vec<_>, _>>()?;
    let approved = answers
        .iter()
        .filter(|a| matches!(a, Solicit::Approved { .. }))
        .count();
    let expected = match approved {
        0 => "R",
        n if n == answers.len() => "A",
        _ => "P",
    };
    if head.as_deref().is_some_and(|h| h != expected) {
        return Err(format!(
            "Resultado {head:?} in the header, {expected} by the details"
        ));
    }
    Ok(answers)
}

/// One `FECAEDetResponse`, which must be for number `nro`.
fn parse_detail(det: &Element, nro: i64, errors: &[Message]) -> Result<Solicit, String> {
    if number::<i64>(det, "CbteDesde")? != nro {
        return Err(format!("the answer is for another number than {nro}"));
    }
    let detail = text(det, "Resultado");
    let observations = messages(det, "Observaciones", "Obs");
    let cae = text(det, "CAE");
    match (detail.as_deref(), cae) {
        (Some("A"), Some(code)) if code.len() == 14 => {
            let due = text(det, "CAEFchVto")
                .as_deref()
                .and_then(parse_date)
                .ok_or("CAEFchVto is missing")?;
            Ok(Solicit::Approved {
                cae: Cae { code, due },
                observations,
            })
        }
        (Some("R"), None) => Ok(Solicit::Rejected {
            errors: errors.to_vec(),
            observations,
        }),
        (d, c) => Err(format!("Resultado {d:?} with CAE {c:?}")),
    }
}

fn parse_found(g: &Element) -> Result<Found, String> {
    let dec = |name: &str| -> Result<Decimal, String> {
        let t = text(g, name).unwrap_or_else(|| "0".into());
        t.parse()
            .map_err(|_| format!("{name} is not an amount: {t}"))
    };
    let cae = Cae {
        code: text(g, "CodAutorizacion").ok_or("CodAutorizacion is missing")?,
        due: text(g, "FchVto")
            .as_deref()
            .and_then(parse_date)
            .ok_or("FchVto is missing")?,
    };
    Ok(Found {
        doc_tipo: number(g, "DocTipo")?,
        doc_nro: number(g, "DocNro")?,
        cbte_fch: text(g, "CbteFch").ok_or("CbteFch is missing")?,
        imp_total: dec("ImpTotal")?,
        imp_neto: dec("ImpNeto")?,
        imp_iva: dec("ImpIVA")?,
        imp_trib: dec("ImpTrib")?,
        imp_op_ex: dec("ImpOpEx")?,
        imp_tot_conc: dec("ImpTotConc")?,
        mon_id: text(g, "MonId").unwrap_or_default(),
        cae,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(cab: &str, det: &str, rest: &str) -> Element {
        let xml = format!(
            "<FECAESolicitarResult xmlns=\"{NS}\"><FeCabResp><Resultado>{cab}</Resultado></FeCabResp>\
             <FeDetResp><FECAEDetResponse>{det}</FECAEDetResponse></FeDetResp>{rest}\
             </FECAESolicitarResult>"
        );
        Element::parse(xml.as_bytes()).expect("xml")
    }

    #[test]
    fn an_approval_carries_its_cae_due_date_and_observations() {
        let r = result(
            "A",
            "<CbteDesde>7</CbteDesde><Resultado>A</Resultado><Observaciones><Obs><Code>10217</Code>\
             <Msg>credito fiscal</Msg></Obs></Observaciones><CAE>71263951827464</CAE>\
             <CAEFchVto>20210711</CAEFchVto>",
            "",
        );
        let Ok(Solicit::Approved { cae, observations }) = parse_solicit(&r, 7) else {
            panic!("approved")
        };
        assert_eq!(cae.code, "71263951827464");
        assert_eq!(cae.due, NaiveDate::from_ymd_opt(2021, 7, 11).expect("date"));
        assert_eq!(observations, [Message::new(10217, "credito fiscal")]);
    }

    #[test]
    fn a_rejection_keeps_arca_s_codes() {
        let r = result(
            "R",
            "<CbteDesde>7</CbteDesde><Resultado>R</Resultado><CAE/><CAEFchVto/>",
            "<Errors><Err><Code>10016</Code><Msg>El numero o fecha</Msg></Err></Errors>",
        );
        let Ok(Solicit::Rejected { errors, .. }) = parse_solicit(&r, 7) else {
            panic!("rejected")
        };
        assert_eq!(errors, [Message::new(10016, "El numero o fecha")]);
    }

    #[test]
    fn contradictory_answers_are_not_answers() {
        let cae = "<CAE>71263951827464</CAE><CAEFchVto>20210711</CAEFchVto>";
        for (cab, det, nro) in [
            (
                "R",
                format!("<CbteDesde>7</CbteDesde><Resultado>A</Resultado>{cae}"),
                7,
            ),
            (
                "A",
                "<CbteDesde>7</CbteDesde><Resultado>A</Resultado>".to_owned(),
                7,
            ),
            (
                "R",
                format!("<CbteDesde>7</CbteDesde><Resultado>R</Resultado>{cae}"),
                7,
            ),
            (
                "A",
                format!("<CbteDesde>8</CbteDesde><Resultado>A</Resultado>{cae}"),
                7,
            ),
        ] {
            let r = result(cab, &det, "");
            assert!(parse_solicit(&r, nro).is_err(), "{cab} {det}");
        }
    }

    #[test]
    fn a_batch_answers_each_voucher_and_the_header_says_partial() {
        let cae = "<CAE>71263951827464</CAE><CAEFchVto>20210711</CAEFchVto>";
        let xml = format!(
            "<FECAESolicitarResult xmlns=\"{NS}\"><FeCabResp><Resultado>P</Resultado></FeCabResp>\
             <FeDetResp><FECAEDetResponse><CbteDesde>7</CbteDesde><Resultado>A</Resultado>{cae}\
             </FECAEDetResponse><FECAEDetResponse><CbteDesde>8</CbteDesde><Resultado>R</Resultado>\
             <Observaciones><Obs><Code>10048</Code><Msg>total</Msg></Obs></Observaciones><CAE/>\
             </FECAEDetResponse><FECAEDetResponse><CbteDesde>9</CbteDesde><Resultado>R</Resultado>\
             <CAE/></FECAEDetResponse></FeDetResp></FECAESolicitarResult>"
        );
        let r = Element::parse(xml.as_bytes()).expect("xml");
        let got = parse_batch(&r, &[7, 8, 9]).expect("answers");
        assert!(matches!(got[0], Solicit::Approved { .. }), "{got:?}");
        assert!(
            matches!(&got[1], Solicit::Rejected { observations, .. } if observations[0].code == 10048)
        );
        assert!(
            matches!(&got[2], Solicit::Rejected { observations, errors } if observations.is_empty() && errors.is_empty())
        );
        assert!(parse_batch(&r, &[7, 8]).is_err(), "one answer per voucher");
        assert!(parse_batch(&r, &[7, 9, 8]).is_err(), "in order");
    }

    #[test]
    fn the_detail_follows_the_wsdl_order_with_two_decimals() {
        let req = Request {
            pto_vta: 4000,
            cbte_tipo: CbteTipo::FacturaB,
            number: 1836,
            cbte_fch: NaiveDate::from_ymd_opt(2021, 7, 1).expect("date"),
            input: VoucherInput::consumidor_final(
                Decimal::new(121, 0),
                crate::arca::model::Alicuota::Veintiuno,
            ),
        };
        let x = detail_xml(&req);
        let order = [
            "<Concepto>1",
            "<DocTipo>99",
            "<DocNro>0",
            "<CbteDesde>1836",
            "<CbteHasta>1836",
            "<CbteFch>20210701",
            "<ImpTotal>121.00",
            "<ImpTotConc>0.00",
            "<ImpNeto>100.00",
            "<ImpOpEx>0.00",
            "<ImpTrib>0.00",
            "<ImpIVA>21.00",
            "<MonId>PES",
            "<MonCotiz>1",
            "<CondicionIVAReceptorId>5",
            "<Iva><AlicIva><Id>5</Id><BaseImp>100.00",
        ];
        let at: Vec<usize> = order
            .iter()
            .map(|t| x.find(t).unwrap_or_else(|| panic!("{t} in {x}")))
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{x}");
    }
}
