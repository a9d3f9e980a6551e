//! The sandbox ARCA: WSFEv1 as the appliance meets it, checking what ARCA checks, over real
//! HTTP ([`server`]): in-process for tests ([`server::start`]) or `autofactura arca-sim`.
//!
//! It enforces consecutive numbering per (CUIT, punto de venta, voucher type): a voucher is
//! accepted only at last + 1 with a date not before the last one, else `10016`; a rejection
//! uses no number. A batch (`CantReg` > 1, at most `FECompTotXRequest`'s 250, else `10003`) is
//! processed in order and stops at its first refusal: the later vouchers come back `R`
//! unprocessed, and the header says `A`, `R` or `P`. It checks totals, IVA sums and the document rules of each class with the
//! codes of [`crate::arca::model::codes`], CbteFch's window around today (5 days for products,
//! 10 for services) and the dates a service needs, and answers `FECompUltimoAutorizado`,
//! `FECompConsultar` (602 when empty) and `FEDummy`. Its vouchers and tickets are kept in an
//! append-only journal (one JSON line each, the PAC sandbox's [`Journal`]), each line handed to
//! the kernel before the answer leaves, so they survive a restart or `kill -9`.
//!
//! Faults ([`faults`]), for tests and the chaos run: the PAC sandbox's latency, 5xx, resets,
//! lost answers (authorized, then dropped) and outage windows, and ARCA's own (`lose_next=N`,
//! `down=true`, `hang_next=N`, `strict_auth`, `ticket_seconds`, `ptos_venta`), set at start or
//! with `PUT /_sim/faults`. WSAA `LoginCms` is modelled in [`wsaa`]. Not modelled yet: the
//! other `FEParamGet*` catalogs.
//!
//! Who may import it: the CLI, the chaos run and tests. It imports [`crate::arca`] (the model
//! and the envelopes' readers) and from [`crate::pacsim`] the server handle, the
//! dropped-connection body, the journal and the fault spec.

pub mod faults;
pub mod server;
pub mod wsaa;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use chrono::{Duration, NaiveDate, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::arca::model::{
    AlicIva, Alicuota, CbteAsoc, CbteTipo, Concepto, DocTipo, Message, VoucherInput, codes,
};
use crate::arca::wsfe::{find, find_all, number, parse_date, text, yyyymmdd};
use crate::cfdi::dom::Element;
use crate::pacsim::faults::Faults;
use crate::pacsim::state::Journal;

/// One authorized voucher, as `FECompConsultar` echoes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimVoucher {
    pub cuit: i64,
    pub pto_vta: i32,
    pub cbte_tipo: i32,
    pub number: i64,
    /// `yyyymmdd`.
    pub cbte_fch: String,
    /// What was sent, as the sandbox read it.
    pub input: VoucherInput,
    pub cae: String,
    /// `yyyymmdd`.
    pub cae_due: String,
    pub fch_proceso: String,
}

#[derive(Debug, Default)]
struct State {
    vouchers: Vec<SimVoucher>,
    /// CAEs handed out so far (the next one is derived from it).
    caes: u64,
    /// WSAA tickets handed out and still valid.
    tickets: Vec<wsaa::SimTicket>,
}

/// A line of the journal.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum Record {
    Voucher(Box<SimVoucher>),
    Ticket(wsaa::SimTicket),
}

/// The first CAE of the sandbox, less one.
const CAE_BASE: u64 = 71_000_000_000_000;

/// What one `FECAEDetRequest` came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DetAnswer {
    Approved(Box<SimVoucher>),
    Rejected { number: i64, errors: Vec<Message> },
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("arca-sim state {0}: {1}")]
    State(PathBuf, String),
    #[error("arca-sim cannot listen: {0}")]
    Listen(std::io::Error),
}

/// The sandbox's state and faults.
#[derive(Debug)]
pub struct ArcaSim {
    state: Mutex<State>,
    /// Taken under `state`'s lock, never the other way round.
    journal: Mutex<Journal>,
    /// The PAC sandbox's faults (latency, 5xx, resets, lost answers, outage windows), as
    /// [`faults`] allows them for WSFEv1.
    timed: RwLock<Arc<Faults>>,
    /// Faults injected so far (answers refused, dropped, held or broken on purpose).
    pub injected: AtomicU64,
    /// Answers of authorized `FECAESolicitar` still to lose.
    pub lose_next: AtomicU32,
    /// Every WSFEv1 call answered 503.
    pub down: AtomicBool,
    /// `FECAESolicitar` still to refuse as ARCA refuses a buyer its registry does not know.
    pub refuse_next: AtomicU32,
    /// `FECAESolicitar` requests received, answered or not: what was sent.
    pub solicits: AtomicU64,
    /// Answers of authorized `FECAESolicitar` still to hold for two minutes (the process
    /// that sent them can be killed while it waits).
    pub hang_next: AtomicU32,
    /// The CUIT's web-services points of sale (`FEParamGetPtosVenta`); 1 to 20 unless set
    /// with `ptos_venta=3+4`.
    pub ptos_venta: Mutex<Vec<i32>>,
    /// How many vouchers one `FECAESolicitar` may carry (`FECompTotXRequest`; ARCA's
    /// homologación answered 250), set with `reg_x_req=N`.
    pub max_records: AtomicU64,
    /// `FEParamGetPtosVenta` requests received.
    pub ptos_venta_asked: AtomicU64,
    /// `loginCms` tickets handed out.
    pub logins: AtomicU64,
    /// `loginCms` requests received, refused or not.
    pub login_attempts: AtomicU64,
    /// Tickets still to hand out and then lose (the connection dropped instead of the
    /// answer: a login whose process died before it stored the ticket).
    pub lose_logins: AtomicU32,
    /// How long after a ticket is handed out a new login of the same certificate and service
    /// is refused (`coe.alreadyAuthenticated`) while it is valid. ARCA reportedly accepts a
    /// new login 2 (production) to 10 (homologación) minutes after the last: 600 s here.
    pub relogin_seconds: AtomicU64,
    /// How long a new WSAA ticket lives (ARCA's: 12 h).
    pub ticket_seconds: AtomicU64,
    /// WSFEv1 calls must carry a ticket this sandbox handed out, valid now (else any non-empty
    /// Token and Sign pass, for tests of the issuer alone).
    pub strict_auth: AtomicBool,
}

fn required(e: &Element, name: &str) -> Result<String, Message> {
    text(e, name).ok_or_else(|| Message::new(10000, format!("El campo {name} es obligatorio")))
}

fn int<T: std::str::FromStr>(e: &Element, name: &str) -> Result<T, Message> {
    number(e, name).map_err(|m| Message::new(10000, m))
}

fn amount(e: &Element, name: &str) -> Result<Decimal, Message> {
    required(e, name)?
        .parse()
        .map_err(|_| Message::new(10000, format!("El campo {name} no es un importe")))
}

fn date(e: &Element, name: &str) -> Result<Option<NaiveDate>, Message> {
    text(e, name)
        .map(|t| {
            parse_date(&t).ok_or_else(|| Message::new(10000, format!("{name} no es una fecha")))
        })
        .transpose()
}

/// The input a `FECAEDetRequest` carries, read as ARCA reads it.
fn read_input(d: &Element) -> Result<VoucherInput, Message> {
    let concepto = Concepto::from_code(int(d, "Concepto")?)
        .ok_or_else(|| Message::new(10000, "Concepto no valido"))?;
    let doc_tipo = DocTipo::from_code(int(d, "DocTipo")?)
        .ok_or_else(|| Message::new(codes::DOCUMENT, "DocTipo no valido"))?;
    let mut iva = Vec::new();
    let mut items = Vec::new();
    if let Some(block) = find(d, "Iva") {
        find_all(block, "AlicIva", &mut items);
    }
    for a in items {
        iva.push(AlicIva {
            alicuota: Alicuota::from_id(int(a, "Id")?)
                .ok_or_else(|| Message::new(codes::IVA_SUM, "Id de alicuota no valido"))?,
            base_imp: amount(a, "BaseImp")?,
            importe: amount(a, "Importe")?,
        });
    }
    let mut asoc = Vec::new();
    if let Some(block) = find(d, "CbtesAsoc") {
        let mut listed = Vec::new();
        find_all(block, "CbteAsoc", &mut listed);
        for a in listed {
            asoc.push(CbteAsoc {
                tipo: int(a, "Tipo")?,
                pto_vta: int(a, "PtoVta")?,
                nro: int(a, "Nro")?,
                cuit: int(a, "Cuit")?,
                cbte_fch: date(a, "CbteFch")?.ok_or_else(|| {
                    Message::new(codes::CBTE_ASOC_NOT_FOUND, "CbteAsoc sin CbteFch")
                })?,
            });
        }
    }
    // Mandatory under RG 5616: its absence has a code of its own.
    let condicion = text(d, "CondicionIVAReceptorId").ok_or_else(|| {
        Message::new(
            codes::CONDICION_IVA_MISSING,
            "Campo Condicion Frente al IVA del receptor es obligatorio conforme a lo \
             reglamentado por la Resolucion General Nro 5616. Para mas informacion consultar \
             metodo FEParamGetCondicionIvaReceptor",
        )
    })?;
    Ok(VoucherInput {
        concepto,
        doc_tipo,
        doc_nro: int(d, "DocNro")?,
        imp_total: amount(d, "ImpTotal")?,
        imp_tot_conc: amount(d, "ImpTotConc")?,
        imp_neto: amount(d, "ImpNeto")?,
        imp_op_ex: amount(d, "ImpOpEx")?,
        imp_trib: amount(d, "ImpTrib")?,
        imp_iva: amount(d, "ImpIVA")?,
        fch_serv_desde: date(d, "FchServDesde")?,
        fch_serv_hasta: date(d, "FchServHasta")?,
        fch_vto_pago: date(d, "FchVtoPago")?,
        mon_id: required(d, "MonId")?,
        mon_cotiz: amount(d, "MonCotiz")?,
        condicion_iva_receptor: condicion.parse().map_err(|_| {
            Message::new(
                codes::CONDICION_IVA_INVALID,
                "El campo Condicion IVA receptor no es un valor valido",
            )
        })?,
        iva,
        cbtes_asoc: asoc,
    })
}

impl ArcaSim {
    /// Opens (or starts) the sandbox whose vouchers live in `path`.
    pub fn open(path: &Path) -> Result<ArcaSim, SimError> {
        let mut state = State::default();
        let journal = Journal::replay(path, |r: Record| match r {
            Record::Voucher(v) => {
                let n = v.cae.parse::<u64>().unwrap_or_default();
                state.caes = state.caes.max(n.saturating_sub(CAE_BASE));
                state.vouchers.push(*v);
            }
            Record::Ticket(t) => state.tickets.push(t),
        })
        .map_err(|e| SimError::State(path.to_owned(), e.to_string()))?;
        Ok(ArcaSim {
            state: Mutex::new(state),
            journal: Mutex::new(journal),
            timed: RwLock::new(faults::no_faults()),
            injected: AtomicU64::new(0),
            lose_next: AtomicU32::new(0),
            down: AtomicBool::new(false),
            refuse_next: AtomicU32::new(0),
            solicits: AtomicU64::new(0),
            hang_next: AtomicU32::new(0),
            ptos_venta: Mutex::new((1..=20).collect()),
            max_records: AtomicU64::new(250),
            ptos_venta_asked: AtomicU64::new(0),
            logins: AtomicU64::new(0),
            login_attempts: AtomicU64::new(0),
            lose_logins: AtomicU32::new(0),
            relogin_seconds: AtomicU64::new(600),
            ticket_seconds: AtomicU64::new(12 * 3600),
            strict_auth: AtomicBool::new(false),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every authorized voucher, in the order they were authorized.
    pub fn vouchers(&self) -> Vec<SimVoucher> {
        self.state().vouchers.clone()
    }

    /// How many vouchers were authorized.
    pub fn voucher_count(&self) -> usize {
        self.state().vouchers.len()
    }

    fn last(state: &State, cuit: i64, pto_vta: i32, tipo: i32) -> Option<&SimVoucher> {
        state
            .vouchers
            .iter()
            .filter(|v| v.cuit == cuit && v.pto_vta == pto_vta && v.cbte_tipo == tipo)
            .max_by_key(|v| v.number)
    }

    /// `FECompUltimoAutorizado`.
    pub fn last_authorized(&self, cuit: i64, pto_vta: i32, tipo: i32) -> i64 {
        Self::last(&self.state(), cuit, pto_vta, tipo).map_or(0, |v| v.number)
    }

    /// `FECompConsultar`.
    pub fn consult(&self, cuit: i64, pto_vta: i32, tipo: i32, nro: i64) -> Option<SimVoucher> {
        self.state()
            .vouchers
            .iter()
            .find(|v| {
                v.cuit == cuit && v.pto_vta == pto_vta && v.cbte_tipo == tipo && v.number == nro
            })
            .cloned()
    }

    /// One `FECAEDetRequest` of `cuit`'s `pto_vta`/`tipo`: checked, numbered, and written to
    /// the state file before the answer is returned.
    pub fn authorize(
        &self,
        cuit: i64,
        pto_vta: i32,
        tipo: i32,
        d: &Element,
    ) -> std::io::Result<DetAnswer> {
        let number = int::<i64>(d, "CbteDesde").unwrap_or(0);
        let reject = |errors| Ok(DetAnswer::Rejected { number, errors });
        let Some(cbte_tipo) = CbteTipo::from_code(tipo) else {
            return reject(vec![Message::new(10000, "CbteTipo no valido")]);
        };
        let input = match read_input(d) {
            Ok(i) => i,
            Err(m) => return reject(vec![m]),
        };
        let fch = match required(d, "CbteFch") {
            Ok(f) if parse_date(&f).is_some() => f,
            _ => return reject(vec![Message::new(10000, "CbteFch no es una fecha")]),
        };
        let mut state = self.state();
        let last = Self::last(&state, cuit, pto_vta, tipo);
        let next = last.map_or(0, |v| v.number) + 1;
        let hasta = int::<i64>(d, "CbteHasta").unwrap_or(0);
        if number != next || hasta != number || last.is_some_and(|l| fch < l.cbte_fch) {
            return reject(vec![Message::new(
                codes::NOT_NEXT,
                "El numero o fecha del comprobante no se corresponde con el proximo a \
                 autorizar. Consultar metodo FECompUltimoAutorizado.",
            )]);
        }
        let today = (Utc::now() - Duration::hours(3)).date_naive();
        let mut errors = input.problems(cbte_tipo);
        errors.extend(input.date_problems(parse_date(&fch).unwrap_or_default(), today));
        errors.extend(Self::asoc_problems(&state, cuit, cbte_tipo, &input));
        if take(&self.refuse_next) {
            errors.push(Message::new(
                codes::DOCUMENT,
                format!(
                    "El documento {} {} no figura en el padron de ARCA",
                    input.doc_tipo.code(),
                    input.doc_nro
                ),
            ));
        }
        if !errors.is_empty() {
            return reject(errors);
        }
        state.caes += 1;
        let due = parse_date(&fch).unwrap_or_default() + Duration::days(10);
        let v = SimVoucher {
            cuit,
            pto_vta,
            cbte_tipo: tipo,
            number,
            cbte_fch: fch,
            input,
            cae: format!("{}", CAE_BASE + state.caes),
            cae_due: yyyymmdd(due),
            fch_proceso: Utc::now().format("%Y%m%d%H%M%S").to_string(),
        };
        self.save(&Record::Voucher(Box::new(v.clone())))?;
        state.vouchers.push(v.clone());
        Ok(DetAnswer::Approved(Box::new(v)))
    }

    /// A nota de crédito credits authorized vouchers of its emisor, of its class, dated on or
    /// before it; each `CbteAsoc` must name one (type, punto de venta, number, CUIT and date).
    fn asoc_problems(
        state: &State,
        cuit: i64,
        tipo: CbteTipo,
        input: &VoucherInput,
    ) -> Vec<Message> {
        if !tipo.is_credit_note() {
            return Vec::new();
        }
        input
            .cbtes_asoc
            .iter()
            .filter(|a| {
                !state.vouchers.iter().any(|v| {
                    v.cuit == a.cuit
                        && a.cuit == cuit
                        && v.pto_vta == a.pto_vta
                        && v.cbte_tipo == a.tipo
                        && v.number == a.nro
                        && v.cbte_fch == yyyymmdd(a.cbte_fch)
                        && CbteTipo::from_code(v.cbte_tipo)
                            .is_some_and(|t| !t.is_credit_note() && t.class() == tipo.class())
                })
            })
            .map(|a| {
                Message::new(
                    codes::CBTE_ASOC_NOT_FOUND,
                    format!(
                        "El comprobante asociado (tipo {}, punto de venta {}, numero {}, CUIT {}, \
                         fecha {}) no existe o no esta autorizado para el emisor",
                        a.tipo,
                        a.pto_vta,
                        a.nro,
                        a.cuit,
                        yyyymmdd(a.cbte_fch)
                    ),
                )
            })
            .collect()
    }

    /// Appends `r` to the journal: once this returns, the line is the kernel's and outlives
    /// a `kill -9` of the sandbox (called under the state's lock, before the answer leaves).
    fn save(&self, r: &Record) -> std::io::Result<()> {
        self.journal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .append(r)
    }

    /// Whether the login ticket now being sent is to be lost (one fewer to lose).
    pub fn take_login_loss(&self) -> bool {
        take(&self.lose_logins)
    }
}

/// Takes one from `n` if it is not zero.
fn take(n: &AtomicU32) -> bool {
    n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}
