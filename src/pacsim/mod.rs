//! The sandbox PAC: checks what a real PAC checks (the XSD's facets and catalogs in
//! [`schema`]), stamps with its own certificate, deduplicates like SW and like Finkok, models SAT
//! cancellation and status, injects faults, and remembers everything across `kill -9`.
//!
//! It speaks SW's REST shape ([`server`]), so the SW adapter ([`crate::pac::sw`]) talks to it
//! in-process (the embedded default, [`Sandbox::start_in_process`]), from tests, and as
//! `autofactura pac-sim --listen ADDR`; and Finkok's SOAP shape ([`finkok`]) over the same
//! state, for the Finkok adapter. `GET /_sim/stamps` lists every stamp ever issued: the
//! ground truth for "one payment, one UUID".
//!
//! Rejection codes (SAT's timbrado validations as PACs report them): `301` XML mal formado
//! (unparsable, a required element/attribute missing, or an attribute the XSD refuses: pattern,
//! length, decimals or catalog, see [`schema`]), `303` Sello no corresponde al emisor
//! (certificate not the emisor's, or NoCertificado not its serial), `305` La fecha de emisión no
//! está dentro de la vigencia del CSD del emisor, `401` Fecha y hora de generación fuera de
//! rango (older than 72 h or in the future), `CFDI40102` for a Sello that does not verify, and the
//! amount codes of the CFDI validator (`CFDI40108`, `40119`, `40167`, `40215`, `40221`), and
//! the TipoCambio codes `CFDI40114`–`CFDI40118` ([`tipo_cambio`]). Fecha is read as local time
//! at the LugarExpedicion, which must be in `c_CodigoPostal` (`301` otherwise).

pub mod clock;
pub mod faults;
pub mod finkok;
pub mod schema;
pub mod server;
pub mod state;
pub mod tipo_cambio;

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use chrono::{DateTime, Duration, Utc};
use sha2::{Digest, Sha256};

use crate::cfdi::cadena::cadena_comprobante;
use crate::cfdi::dom::{Element, NS_CFDI};
use crate::cfdi::money::parse_amount;
use crate::cfdi::verify::{Report, VerifyOptions, parse_fecha, verify_parsed};
use crate::cfdi::{Certificate, Csd, Tfd, tfd};
use clock::SimClock;
use faults::{FaultSpec, Faults};
use state::{CancelRecord, CancelStatus, Event, Journal, SimState, StampRecord};

pub use server::SandboxHandle;

/// The sandbox's own TFD certificate (self-signed; NoCertificadoSAT `99990000000000000001`).
pub const SANDBOX_PAC_CER: &[u8] = include_bytes!("../../fixtures/pacsim/sandbox-pac.cer");
const SANDBOX_PAC_KEY: &[u8] = include_bytes!("../../fixtures/pacsim/sandbox-pac.key");
const SANDBOX_PAC_PASSWORD: &str = "sandbox-pac";
/// `RfcProvCertif` of sandbox stamps (the generic test RFC: no real PAC has it).
pub const SANDBOX_RFC_PROV_CERTIF: &str = "AAA010101AAA";

fn sandbox_pac_csd() -> Result<Csd, String> {
    Csd::from_bytes(SANDBOX_PAC_CER, SANDBOX_PAC_KEY, SANDBOX_PAC_PASSWORD)
        .map_err(|e| e.to_string())
}

/// What the sandbox answers a stamp request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StampAnswer {
    Stamped(StampRecord),
    /// `307`: this content was stamped before.
    Duplicate(StampRecord),
    /// `CFDI3307`: the customid was used for other content.
    CustomIdReused(StampRecord),
    Rejected {
        code: String,
        message: String,
        detail: Vec<String>,
    },
}

/// What the sandbox answers a cancellation request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelAnswer {
    /// Per-UUID status (`201`, `202`, `203`, `205`, `no_cancelable`) and the acuse.
    Folio { code: String, acuse: String },
    /// The request itself is wrong (bad motivo, missing folio de sustitución).
    Invalid { message: String },
}

/// The fields of a SAT status answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusAnswer {
    pub codigo_estatus: String,
    pub estado: String,
    pub es_cancelable: String,
    pub estatus_cancelacion: String,
}

struct Inner {
    state: SimState,
    journal: Journal,
}

/// The sandbox PAC's logic, independent of HTTP.
pub struct Sim {
    inner: Mutex<Inner>,
    faults: RwLock<Arc<Faults>>,
    clock: SimClock,
    pac: Csd,
    /// Accepted credentials for `/security/authenticate`.
    pub user: String,
    pub password: String,
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("state file {0}: {1}")]
    State(String, std::io::Error),
    #[error("{0}")]
    Setup(String),
    #[error("cannot listen: {0}")]
    Listen(std::io::Error),
}

fn reject(code: &str, text: &str, detail: Vec<String>) -> StampAnswer {
    StampAnswer::Rejected {
        code: code.to_owned(),
        message: format!("{code} - {text}"),
        detail,
    }
}

fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

impl Sim {
    /// Opens the sandbox over the journal at `state_path`.
    pub fn open(state_path: &Path, faults: FaultSpec) -> Result<Sim, SimError> {
        let (journal, state) = Journal::open(state_path)
            .map_err(|e| SimError::State(state_path.display().to_string(), e))?;
        let clock = SimClock::default();
        clock.advance(state.clock_offset);
        Ok(Sim {
            inner: Mutex::new(Inner { state, journal }),
            faults: RwLock::new(Arc::new(Faults::new(faults))),
            clock,
            pac: sandbox_pac_csd().map_err(SimError::Setup)?,
            user: "sandbox".into(),
            password: "sandbox".into(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn faults(&self) -> Arc<Faults> {
        self.faults
            .read()
            .map(|f| f.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    pub fn set_faults(&self, spec: FaultSpec) {
        let mut f = self
            .faults
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *f = Arc::new(Faults::new(spec));
    }

    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// Moves the sandbox clock forward, durably.
    pub fn advance_clock(&self, seconds: i64) -> std::io::Result<()> {
        let mut inner = self.lock();
        let ev = Event::ClockAdvanced {
            seconds: seconds.max(0),
        };
        inner.journal.append(&ev)?;
        inner.state.apply(&ev);
        self.clock.advance(seconds);
        Ok(())
    }

    /// Every stamp ever issued, oldest first.
    pub fn stamps(&self) -> Vec<StampRecord> {
        self.lock().state.stamps.clone()
    }

    pub fn stamp_by_uuid(&self, uuid: &str) -> Option<StampRecord> {
        self.lock().state.stamp(uuid).cloned()
    }

    /// How long the SAT window of a stamp's Fecha had left when it was issued (`lose_late`);
    /// `None` unless that fault is set.
    pub fn window_left(&self, s: &StampRecord) -> Option<Duration> {
        if self.faults().spec().lose_late.is_zero() {
            return None;
        }
        let root = Element::parse(s.xml.as_bytes()).ok()?;
        let fecha = root.attr("Fecha").and_then(parse_fecha)?;
        let lugar = root.attr("LugarExpedicion").unwrap_or_default();
        Some(fecha + Duration::hours(72) - clock::to_local_at(s.stamped_at, lugar))
    }

    /// Finkok's `stamped`: the stamp of these bytes (same cadena original), once its
    /// `stamped_lag` has passed; `None` while it lags or when the content was never stamped.
    pub fn stamped_by_content(&self, xml: &[u8]) -> Option<StampRecord> {
        let root = Element::parse(xml).ok()?;
        let sha = sha256_hex(&cadena_comprobante(&root).ok()?);
        let now = self.clock.now();
        let faults = self.faults();
        let inner = self.lock();
        let s = inner.state.stamps.get(*inner.state.by_cadena.get(&sha)?)?;
        let lag = Duration::from_std(faults.stamped_lag(&s.uuid)).unwrap_or_default();
        (now >= s.stamped_at + lag).then(|| s.clone())
    }

    /// `EstatusCancelacion` of the cancellation requested for `uuid`, as of now.
    pub fn cancel_estatus(&self, uuid: &str) -> Option<String> {
        let now = self.clock.now();
        self.lock()
            .state
            .cancels
            .get(&uuid.to_uppercase())
            .map(|c| c.status.at(now).estatus().to_owned())
    }

    /// Checks and stamps `xml` under `customid`, or says why not. The stamp is on disk before
    /// this returns.
    pub fn stamp(&self, xml: &[u8], customid: Option<&str>) -> Result<StampAnswer, std::io::Error> {
        let root = match Element::parse(xml) {
            Ok(r) => r,
            Err(e) => return Ok(reject("301", "XML mal formado", vec![e.to_string()])),
        };
        if !root.is(NS_CFDI, "Comprobante") || root.attr("Version") != Some("4.0") {
            return Ok(reject(
                "301",
                "XML mal formado",
                vec!["the root is not a CFDI 4.0 cfdi:Comprobante".into()],
            ));
        }
        // Everything a PAC checks, computed once: the report carries the cadena too.
        let report = verify_parsed(&root, &VerifyOptions::default());
        let cadena = match &report.cadena {
            Some(c) => c.clone(),
            None => match cadena_comprobante(&root) {
                Ok(c) => c,
                Err(e) => return Ok(reject("301", "XML mal formado", vec![e.to_string()])),
            },
        };
        let cadena_sha256 = sha256_hex(&cadena);
        let now = self.clock.now();
        let window =
            Duration::from_std(self.faults().spec().customid_window).unwrap_or(Duration::hours(72));
        let customid = customid.map(str::trim).filter(|c| !c.is_empty());

        // Deduplication, under the lock: first the key, then the content.
        let inner = self.lock();
        if let Some(c) = customid
            && let Some(&i) = inner.state.by_customid.get(c)
        {
            let prev = &inner.state.stamps[i];
            if now - prev.stamped_at < window {
                return Ok(if prev.cadena_sha256 == cadena_sha256 {
                    StampAnswer::Duplicate(prev.clone())
                } else {
                    StampAnswer::CustomIdReused(prev.clone())
                });
            }
        }
        if let Some(&i) = inner.state.by_cadena.get(&cadena_sha256) {
            return Ok(StampAnswer::Duplicate(inner.state.stamps[i].clone()));
        }
        drop(inner);

        if let Some(rejection) = self.check(&report, &root, now) {
            return Ok(rejection);
        }

        let uuid = uuid::Uuid::new_v4().to_string().to_uppercase();
        let fecha_timbrado = clock::to_local(now).format("%Y-%m-%dT%H:%M:%S").to_string();
        let issued = Tfd::issue(
            &root,
            &uuid,
            &fecha_timbrado,
            SANDBOX_RFC_PROV_CERTIF,
            &self.pac,
        )
        .and_then(|t| tfd::attach(xml, &t));
        let stamped = match issued {
            Ok(x) => x,
            Err(e) => return Ok(reject("301", "XML mal formado", vec![e.to_string()])),
        };
        let record = record_of(
            &root,
            uuid,
            customid,
            cadena_sha256,
            now,
            fecha_timbrado,
            stamped,
        );

        let mut inner = self.lock();
        // A concurrent request may have stamped the same content meanwhile.
        if let Some(&i) = inner.state.by_cadena.get(&record.cadena_sha256) {
            return Ok(StampAnswer::Duplicate(inner.state.stamps[i].clone()));
        }
        if let Some(c) = customid
            && let Some(&i) = inner.state.by_customid.get(c)
            && now - inner.state.stamps[i].stamped_at < window
        {
            return Ok(StampAnswer::CustomIdReused(inner.state.stamps[i].clone()));
        }
        let ev = Event::Stamp(record.clone());
        inner.journal.append(&ev)?;
        inner.state.apply(&ev);
        Ok(StampAnswer::Stamped(record))
    }

    /// The validations, in the order a PAC reports them; `None` when the document passes.
    fn check(&self, report: &Report, root: &Element, now: DateTime<Utc>) -> Option<StampAnswer> {
        // Schema level first (XSD facets and catalogs, then the structure problems without a
        // SAT code), as a PAC validates against the XSD before anything else.
        let mut structural = schema::check(root);
        let cert = root
            .attr("Certificado")
            .and_then(|c| Certificate::from_base64(c).ok());
        let Some(cert) = cert else {
            structural.push("Certificado is missing or unreadable".into());
            return Some(reject("301", "XML mal formado", structural));
        };
        let fecha = root.attr("Fecha").and_then(parse_fecha);
        structural.extend(
            report
                .problems
                .iter()
                .filter(|p| {
                    p.code.is_none()
                        && !p.message.contains("certificate")
                        && !p.message.contains("NoCertificado")
                })
                .map(ToString::to_string),
        );
        if !structural.is_empty() || fecha.is_none() {
            return Some(reject("301", "XML mal formado", structural));
        }
        let fecha = fecha?;
        let rfc_emisor = root
            .child_attr(NS_CFDI, "Emisor", "Rfc")
            .unwrap_or_default();
        if root.attr("NoCertificado") != Some(cert.no_certificado())
            || cert.rfc().is_some_and(|r| r != rfc_emisor)
        {
            return Some(reject(
                "303",
                "Sello no corresponde al emisor",
                vec![format!(
                    "certificate {} ({:?}) vs Emisor {rfc_emisor}",
                    cert.no_certificado(),
                    cert.rfc()
                )],
            ));
        }
        if !cert.valid_at_local(fecha) {
            return Some(reject(
                "305",
                "La fecha de emisión no está dentro de la vigencia del CSD del Emisor",
                vec![format!(
                    "Fecha {fecha}; certificate valid {} to {}",
                    cert.not_before(),
                    cert.not_after()
                )],
            ));
        }
        if let Some(p) = report.problems.iter().find(|p| p.code == Some("CFDI40102")) {
            return Some(reject(
                "CFDI40102",
                "El resultado de la digestión debe ser igual al resultado de la desencripción del sello.",
                vec![p.message.clone()],
            ));
        }
        if let Some(p) = report.problems.iter().find(|p| p.code.is_some()) {
            let code = p.code.unwrap_or_default();
            let detail = report.problems.iter().map(ToString::to_string).collect();
            return Some(StampAnswer::Rejected {
                code: code.to_owned(),
                message: format!("{code} - {}", p.message),
                detail,
            });
        }
        if let Some((code, message, detail)) = tipo_cambio::check(root) {
            return Some(StampAnswer::Rejected {
                code: code.to_owned(),
                message: format!("{code} - {message}"),
                detail: vec![detail],
            });
        }
        let rfc_receptor = root
            .child_attr(NS_CFDI, "Receptor", "Rfc")
            .unwrap_or_default();
        if self
            .faults()
            .spec()
            .unregistered_rfcs
            .iter()
            .any(|r| r == rfc_receptor)
        {
            return Some(reject(
                "CFDI40143",
                "Este RFC del receptor no existe en la lista de RFC inscritos no cancelados del SAT.",
                vec![format!(
                    "receptor {rfc_receptor} (sandbox fault unregistered_rfc)"
                )],
            ));
        }
        // Fecha is local time at the LugarExpedicion (its huso_horario in c_CodigoPostal).
        let now_local = clock::to_local_at(now, root.attr("LugarExpedicion").unwrap_or_default());
        if fecha > now_local || now_local - fecha > Duration::hours(72) {
            return Some(reject(
                "401",
                "Fecha y hora de generación fuera de rango",
                vec![format!(
                    "Fecha {fecha}, sandbox time {now_local}: more than 72 hours old or in the future"
                )],
            ));
        }
        None
    }

    /// Whether a cancellation needs no acceptance: the same regla 2.7.1.35 rule the admin shows
    /// ([`crate::domain::cancellation`]), applied to what the sandbox recorded of the stamp.
    fn sin_aceptacion(s: &StampRecord, now: DateTime<Utc>) -> bool {
        let facts = crate::domain::cancellation::CancelFacts {
            uuid: s.uuid.clone(),
            rfc_emisor: s.rfc_emisor.clone(),
            rfc_receptor: s.rfc_receptor.clone(),
            total: s.total.clone(),
            moneda: s.moneda.clone(),
            tipo_cambio: s.tipo_cambio.clone(),
            tipo: s.tipo.clone(),
            fecha_timbrado: s.fecha_timbrado.clone(),
            global: false,
            related: Vec::new(),
        };
        !crate::domain::cancellation::requires_acceptance(&facts, now)
    }

    /// Live CFDIs that relate to `uuid`, other than `except`.
    fn live_relations(
        state: &SimState,
        uuid: &str,
        except: Option<&str>,
        now: DateTime<Utc>,
    ) -> Vec<String> {
        state
            .stamps
            .iter()
            .filter(|s| s.related.iter().any(|r| r.eq_ignore_ascii_case(uuid)))
            .filter(|s| except.is_none_or(|e| !s.uuid.eq_ignore_ascii_case(e)))
            .filter(|s| {
                !state
                    .cancels
                    .get(&s.uuid)
                    .is_some_and(|c| c.status.at(now).is_cancelled())
            })
            .map(|s| s.uuid.clone())
            .collect()
    }

    fn es_cancelable(state: &SimState, s: &StampRecord, now: DateTime<Utc>) -> &'static str {
        if !Self::live_relations(state, &s.uuid, None, now).is_empty() {
            "No cancelable"
        } else if Self::sin_aceptacion(s, now) {
            "Cancelable sin aceptación"
        } else {
            "Cancelable con aceptación"
        }
    }

    fn ingested(&self, s: &StampRecord, now: DateTime<Utc>) -> bool {
        let delay = Duration::from_std(self.faults().spec().ingest).unwrap_or_default();
        now >= s.stamped_at + delay
    }

    /// A cancellation request, as SAT would take it through the PAC.
    pub fn cancel(
        &self,
        rfc: &str,
        uuid: &str,
        motivo: &str,
        folio: Option<&str>,
    ) -> Result<CancelAnswer, std::io::Error> {
        let now = self.clock.now();
        let uuid = uuid.to_uppercase();
        if crate::pac::Motivo::parse(motivo).is_none() {
            return Ok(CancelAnswer::Invalid {
                message: format!("301 - XML mal formado: Motivo `{motivo}` no es 01, 02, 03 ni 04"),
            });
        }
        let folio = folio.map(str::to_uppercase).filter(|f| !f.is_empty());
        let mut inner = self.lock();
        let acuse = |code: &str| acuse_xml(rfc, &uuid, code, now);
        if motivo == "01" {
            let Some(f) = &folio else {
                return Ok(CancelAnswer::Invalid {
                    message: "301 - XML mal formado: el motivo 01 requiere FolioSustitucion".into(),
                });
            };
            if inner.state.stamp(f).is_none() {
                return Ok(CancelAnswer::Invalid {
                    message: format!(
                        "301 - XML mal formado: FolioSustitucion {f} no es un CFDI timbrado"
                    ),
                });
            }
        }
        let Some(s) = inner
            .state
            .stamp(&uuid)
            .cloned()
            .filter(|s| self.ingested(s, now))
        else {
            return Ok(CancelAnswer::Folio {
                code: "205".into(),
                acuse: acuse("205"),
            });
        };
        if !s.rfc_emisor.eq_ignore_ascii_case(rfc) {
            return Ok(CancelAnswer::Folio {
                code: "203".into(),
                acuse: acuse("203"),
            });
        }
        let first = match inner.state.cancels.get(&uuid).map(|c| c.status.at(now)) {
            Some(CancelStatus::Rejected) => false,
            Some(_) => {
                return Ok(CancelAnswer::Folio {
                    code: "202".into(),
                    acuse: acuse("202"),
                });
            }
            None => true,
        };
        let except = if motivo == "01" {
            folio.as_deref()
        } else {
            None
        };
        if !Self::live_relations(&inner.state, &uuid, except, now).is_empty() {
            return Ok(CancelAnswer::Folio {
                code: "no_cancelable".into(),
                acuse: acuse("no_cancelable"),
            });
        }
        let es_cancelable = Self::es_cancelable(&inner.state, &s, now);
        let status = if Self::sin_aceptacion(&s, now) {
            CancelStatus::CancelledWithoutAcceptance
        } else {
            // The receptor has 3 business days on the first request; none after a rejection.
            CancelStatus::Pending {
                deadline: first.then(|| clock::add_business_days(now, 3)),
            }
        };
        let record = CancelRecord {
            uuid: uuid.clone(),
            motivo: motivo.to_owned(),
            folio_sustitucion: folio.clone(),
            requested_at: now,
            status,
            es_cancelable: es_cancelable.to_owned(),
            acuse: acuse("201"),
        };
        let ev = Event::Cancel(record.clone());
        inner.journal.append(&ev)?;
        inner.state.apply(&ev);
        Ok(CancelAnswer::Folio {
            code: "201".into(),
            acuse: record.acuse,
        })
    }

    /// The receptor accepts or rejects a pending cancellation (sandbox control).
    pub fn decide_cancellation(
        &self,
        uuid: &str,
        accepted: bool,
    ) -> Result<Result<(), String>, std::io::Error> {
        let now = self.clock.now();
        let uuid = uuid.to_uppercase();
        let mut inner = self.lock();
        match inner.state.cancels.get(&uuid).map(|c| c.status.at(now)) {
            Some(CancelStatus::Pending { .. }) => {}
            Some(s) => {
                return Ok(Err(format!(
                    "the cancellation of {uuid} is not pending: {}",
                    s.estatus()
                )));
            }
            None => return Ok(Err(format!("no cancellation was requested for {uuid}"))),
        }
        let ev = Event::CancelDecided {
            uuid,
            accepted,
            at: now,
        };
        inner.journal.append(&ev)?;
        inner.state.apply(&ev);
        Ok(Ok(()))
    }

    /// SAT's `Consulta` for an expresión impresa.
    pub fn status(&self, expression: &str) -> StatusAnswer {
        let now = self.clock.now();
        let not_found = |codigo: &str| StatusAnswer {
            codigo_estatus: codigo.to_owned(),
            estado: "No Encontrado".into(),
            es_cancelable: String::new(),
            estatus_cancelacion: String::new(),
        };
        let bad = "N - 601: La expresión impresa proporcionada no es válida.";
        let params = parse_expression(expression);
        let get = |k: &str| {
            params
                .iter()
                .find(|(pk, _)| pk == k)
                .map(|(_, v)| v.as_str())
        };
        let Some(id) = get("id") else {
            return not_found(bad);
        };
        let inner = self.lock();
        let Some(s) = inner.state.stamp(id).filter(|s| self.ingested(s, now)) else {
            return not_found("N - 602: Comprobante no encontrado.");
        };
        let tt_ok = get("tt").and_then(crate::pac::sat::parse_tt) == parse_amount(&s.total);
        let fe_ok = get("fe").is_none_or(|fe| fe == s.sello_tail);
        if get("re") != Some(s.rfc_emisor.as_str())
            || get("rr") != Some(s.rfc_receptor.as_str())
            || !tt_ok
            || !fe_ok
        {
            return not_found(bad);
        }
        let (estado, es_cancelable, estatus) = match inner.state.cancels.get(&s.uuid) {
            Some(c) => {
                let st = c.status.at(now);
                let estado = if st.is_cancelled() {
                    "Cancelado"
                } else {
                    "Vigente"
                };
                (estado, c.es_cancelable.clone(), st.estatus().to_owned())
            }
            None => (
                "Vigente",
                Self::es_cancelable(&inner.state, s, now).to_owned(),
                String::new(),
            ),
        };
        StatusAnswer {
            codigo_estatus: "S - Comprobante obtenido satisfactoriamente.".into(),
            estado: estado.into(),
            es_cancelable,
            estatus_cancelacion: estatus,
        }
    }
}

/// The `key=value` pairs after the `?` of an expresión impresa (XML entities in RFCs undone).
fn parse_expression(e: &str) -> Vec<(String, String)> {
    let q = e.trim().split_once('?').map_or(e.trim(), |(_, q)| q);
    q.split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| {
            (
                k.trim_start_matches("amp;").to_owned(),
                v.replace("&amp;", "&"),
            )
        })
        .collect()
}

fn acuse_xml(rfc: &str, uuid: &str, code: &str, now: DateTime<Utc>) -> String {
    format!(
        r#"<Acuse xmlns="http://cancelacfd.sat.gob.mx" Fecha="{}" RfcEmisor="{}"><Folios><UUID>{}</UUID><EstatusUUID>{}</EstatusUUID></Folios></Acuse>"#,
        clock::to_local(now).format("%Y-%m-%dT%H:%M:%S"),
        quick_xml::escape::escape(rfc),
        uuid,
        code
    )
}

fn record_of(
    root: &Element,
    uuid: String,
    customid: Option<&str>,
    cadena_sha256: String,
    now: DateTime<Utc>,
    fecha_timbrado: String,
    stamped: Vec<u8>,
) -> StampRecord {
    let a = |k: &str| root.attr(k).unwrap_or_default().to_owned();
    let rfc = |el: &str| {
        root.child_attr(NS_CFDI, el, "Rfc")
            .unwrap_or_default()
            .to_owned()
    };
    let sello = a("Sello");
    StampRecord {
        uuid,
        customid: customid.map(str::to_owned),
        cadena_sha256,
        stamped_at: now,
        fecha_timbrado,
        xml: String::from_utf8_lossy(&stamped).into_owned(),
        rfc_emisor: rfc("Emisor"),
        rfc_receptor: rfc("Receptor"),
        total: a("Total"),
        tipo: a("TipoDeComprobante"),
        moneda: a("Moneda"),
        tipo_cambio: root.attr("TipoCambio").map(str::to_owned),
        sello_tail: sello[sello.len().saturating_sub(8)..].to_owned(),
        related: root
            .path(NS_CFDI, &["CfdiRelacionados", "CfdiRelacionado"])
            .iter()
            .filter_map(|e| e.attr("UUID").map(str::to_uppercase))
            .collect(),
    }
}

/// Starting the sandbox.
pub struct Sandbox;

impl Sandbox {
    /// Runs the sandbox's HTTP server on `127.0.0.1:0` inside this process; returns its base
    /// URL and the handle that stops it.
    pub async fn start_in_process(
        state_path: &Path,
        faults: FaultSpec,
    ) -> Result<(String, SandboxHandle), SimError> {
        let sim = Arc::new(Sim::open(state_path, faults)?);
        let handle = server::start(sim, "127.0.0.1:0")?;
        Ok((handle.url().to_owned(), handle))
    }
}
