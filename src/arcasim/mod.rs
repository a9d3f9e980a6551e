//! The sandbox ARCA: WSFEv1 as the appliance meets it, checking what ARCA checks, over real
//! HTTP ([`server`]): in-process for tests ([`server::start`]) or `autofactura arca-sim`.
//!
//! It enforces consecutive numbering per (CUIT, punto de venta, voucher type): a voucher is
//! accepted only at last + 1 with a date not before the last one, else `10016`; a rejection
//! uses no number. It checks totals, IVA sums and the document rules of each class with the
//! codes of [`crate::arca::model::codes`], CbteFch's window around today (5 days for products,
//! 10 for services) and the dates a service needs, and answers `FECompUltimoAutorizado`,
//! `FECompConsultar` (602 when empty) and `FEDummy`. Its vouchers are kept in a JSON file,
//! written before an answer leaves, so they survive a restart or `kill -9`.
//!
//! Faults, for tests: `lose_next=N` authorizes the next N vouchers and drops the connection
//! instead of answering (the lost answer); `down=true` answers every WSFEv1 call with HTTP 503
//! (ARCA down); `hang_next=N` authorizes the next N and holds each answer two minutes (the
//! sender can be killed meanwhile); `strict_auth=true` makes WSFEv1 ask for a ticket [`wsaa`]
//! handed out (else any non-empty Token and Sign pass); `ticket_seconds=N` shortens the
//! tickets' 12 h; `ptos_venta=3+4` sets what `FEParamGetPtosVenta` lists (1 to 20 by default).
//! WSAA `LoginCms` is modelled in [`wsaa`]. Not modelled yet: the other `FEParamGet*`
//! catalogs, latency and outage windows.
//!
//! Who may import it: the CLI and tests. It imports [`crate::arca`] (the model and the
//! envelopes' readers) and the server handle and the dropped-connection body of
//! [`crate::pacsim::server`].

pub mod server;
pub mod wsaa;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use chrono::{Duration, NaiveDate, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::arca::model::{
    AlicIva, Alicuota, CbteAsoc, CbteTipo, Concepto, DocTipo, Message, VoucherInput, codes,
};
use crate::arca::wsfe::{find, find_all, number, parse_date, text, yyyymmdd};
use crate::cfdi::dom::Element;

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

#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    vouchers: Vec<SimVoucher>,
    /// CAEs handed out so far (the next one is derived from it).
    caes: u64,
    /// WSAA tickets handed out and still valid.
    #[serde(default)]
    tickets: Vec<wsaa::SimTicket>,
}

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
    path: PathBuf,
    /// Answers of authorized `FECAESolicitar` still to lose.
    pub lose_next: AtomicU32,
    /// Every WSFEv1 call answered 503.
    pub down: AtomicBool,
    /// `FECAESolicitar` requests received, answered or not: what was sent.
    pub solicits: AtomicU64,
    /// Answers of authorized `FECAESolicitar` still to hold for two minutes (the process
    /// that sent them can be killed while it waits).
    pub hang_next: AtomicU32,
    /// The CUIT's web-services points of sale (`FEParamGetPtosVenta`); 1 to 20 unless set
    /// with `ptos_venta=3+4`.
    pub ptos_venta: Mutex<Vec<i32>>,
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
        let err = |e: String| SimError::State(path.to_owned(), e);
        let state = match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| err(e.to_string()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::default(),
            Err(e) => return Err(err(e.to_string())),
        };
        Ok(ArcaSim {
            state: Mutex::new(state),
            path: path.to_owned(),
            lose_next: AtomicU32::new(0),
            down: AtomicBool::new(false),
            solicits: AtomicU64::new(0),
            hang_next: AtomicU32::new(0),
            ptos_venta: Mutex::new((1..=20).collect()),
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
            cae: format!("{}", 71_000_000_000_000 + state.caes),
            cae_due: yyyymmdd(due),
            fch_proceso: Utc::now().format("%Y%m%d%H%M%S").to_string(),
        };
        state.vouchers.push(v.clone());
        if let Err(e) = self.save(&state) {
            state.vouchers.pop();
            return Err(e);
        }
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

    /// Writes the whole state to a temporary file, then renames it over the old one, so a
    /// crash leaves one or the other.
    fn save(&self, state: &State) -> std::io::Result<()> {
        let tmp = self.path.with_extension("tmp");
        let bytes = serde_json::to_vec(state).map_err(std::io::Error::other)?;
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)
    }

    /// Applies a fault spec: `none` (no lost or held answers, not down), or `lose_next=N`,
    /// `hang_next=N`, `ptos_venta=N+M+…`,
    /// `down=true|false`, `strict_auth=true|false` and `ticket_seconds=N`, comma-separated.
    pub fn set_faults(&self, spec: &str) -> Result<(), String> {
        let spec = spec.trim();
        if spec.is_empty() || spec == "none" {
            self.lose_next.store(0, Ordering::SeqCst);
            self.hang_next.store(0, Ordering::SeqCst);
            self.down.store(false, Ordering::SeqCst);
            return Ok(());
        }
        for part in spec.split(',') {
            match part.trim().split_once('=') {
                Some(("lose_next", n)) => self.lose_next.store(
                    n.parse().map_err(|_| format!("lose_next={n}"))?,
                    Ordering::SeqCst,
                ),
                Some(("down", b)) => self.down.store(
                    b.parse().map_err(|_| format!("down={b}"))?,
                    Ordering::SeqCst,
                ),
                Some(("hang_next", n)) => self.hang_next.store(
                    n.parse().map_err(|_| format!("hang_next={n}"))?,
                    Ordering::SeqCst,
                ),
                Some(("ptos_venta", list)) => {
                    let points = list
                        .split('+')
                        .map(|n| n.parse().map_err(|_| format!("ptos_venta={list}")))
                        .collect::<Result<Vec<i32>, _>>()?;
                    *self.ptos_venta.lock().unwrap_or_else(|p| p.into_inner()) = points;
                }
                Some(("strict_auth", b)) => self.strict_auth.store(
                    b.parse().map_err(|_| format!("strict_auth={b}"))?,
                    Ordering::SeqCst,
                ),
                Some(("ticket_seconds", n)) => self.ticket_seconds.store(
                    n.parse().map_err(|_| format!("ticket_seconds={n}"))?,
                    Ordering::SeqCst,
                ),
                _ => return Err(format!("unknown fault {part:?}")),
            }
        }
        Ok(())
    }

    /// Whether the answer now being sent is to be lost (one fewer to lose).
    fn take_loss(&self) -> bool {
        take(&self.lose_next)
    }

    /// Whether the answer now being sent is to be held (one fewer to hold).
    pub fn take_hang(&self) -> bool {
        take(&self.hang_next)
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
