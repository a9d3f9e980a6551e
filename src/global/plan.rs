//! What one factura global is, without I/O: the period each sale belongs to, the comprobante
//! (receptor PUBLICO EN GENERAL, InformacionGlobal, one concepto per sale), its stamp key and
//! its own payment row, ready for [`crate::store::Db::freeze_global`].

use crate::domain::PaymentStatus;
use chrono::{DateTime, NaiveDateTime, Utc};
use rust_decimal::Decimal;

use crate::cfdi::{
    self, EmisorData, InformacionGlobalData, InvoiceRequest, LineData, ReceptorData,
    RelacionadosData, Rfc, TaxTreatment, TipoComprobante,
};
use crate::config::{GlobalSettings, Settings};
use crate::domain::period::{Period, Periodicidad};
use crate::domain::{DocumentKind, DocumentState, StampKey};
use crate::ingest::fecha_of;
use crate::store::{GLOBAL_PROVIDER, GlobalIdentity, NewGlobal, NewPayment, OutboxDraft, Sale};

/// `ClaveProdServ` and `ClaveUnidad` of every concepto of a global (SAT's guide).
pub const CLAVE_PROD_SERV: &str = "01010101";
pub const CLAVE_UNIDAD: &str = "ACT";
/// `Descripcion` of every concepto: the SAT's guide writes "Venta".
pub const DESCRIPCION: &str = "Venta";

/// Builds the globals of this appliance's emisor as configured.
#[derive(Debug, Clone)]
pub struct Planner {
    pub emisor: EmisorData,
    pub settings: GlobalSettings,
    tax: TaxTreatment,
    prices_include_tax: bool,
    /// c_FormaPago for a sale that recorded none.
    default_forma_pago: String,
    /// The sandbox PAC stamps test-mode sales; a production PAC never gets them.
    pub sandbox_pac: bool,
    /// `[pac]`'s environment: sales of the other mode stay out of its globals.
    pub pac_env: crate::config::PacEnvironment,
}

/// Which global: number `seq` of `period` in `moneda`.
#[derive(Debug, Clone, Copy)]
pub struct Slot<'a> {
    pub period: Period,
    pub moneda: &'a str,
    pub seq: i32,
}

/// The global that one of its globals replaces (motivo 01): its document and UUID.
#[derive(Debug, Clone, Copy)]
pub struct Replacing<'a> {
    pub outbox_id: i64,
    pub uuid: &'a str,
}

impl Planner {
    pub fn new(s: &Settings) -> Result<Self, String> {
        let rfc = Rfc::parse(&s.emisor.rfc).map_err(|e| e.to_string())?;
        Ok(Planner {
            emisor: EmisorData {
                rfc,
                nombre: s.emisor.nombre.clone(),
                regimen_fiscal: s.emisor.regimen_fiscal.clone(),
                lugar_expedicion: s.emisor.lugar_expedicion.clone(),
            },
            settings: s.global.clone(),
            tax: s
                .tax_treatment()
                .ok_or_else(|| format!("unknown tax {:?}", s.invoice.tax))?,
            prices_include_tax: s.invoice.prices_include_tax,
            default_forma_pago: s.forma_pago.default.clone(),
            sandbox_pac: s.is_sandbox(),
            pac_env: s.pac_environment(),
        })
    }

    pub fn periodicidad(&self) -> Periodicidad {
        self.settings.periodicidad
    }

    /// The period (of the configured periodicidad) a sale paid at `paid_at` belongs to: by
    /// its local date in Mexico City, as its Fecha would be.
    pub fn period_of(&self, paid_at: DateTime<Utc>) -> Period {
        Period::containing(self.settings.periodicidad, fecha_of(paid_at).date())
    }

    /// The stamp key of global number `seq` of `period` in `moneda`.
    pub fn stamp_key(&self, period: &Period, moneda: &str, seq: i32) -> StampKey {
        StampKey::derive(
            GLOBAL_PROVIDER,
            self.emisor.rfc.as_str(),
            &format!("{}:{moneda}:{seq}", period.key()),
        )
    }

    /// The comprobante of a global of `sales` (one concepto each, in order) for `period`.
    pub fn request(
        &self,
        period: &Period,
        moneda: &str,
        sales: &[Sale],
        fecha: NaiveDateTime,
        replacing: Option<Replacing<'_>>,
    ) -> Result<InvoiceRequest, String> {
        let mut lines = Vec::with_capacity(sales.len());
        let mut by_forma: std::collections::BTreeMap<String, Decimal> = Default::default();
        for s in sales {
            let amount: Decimal = s
                .amount
                .parse()
                .map_err(|_| format!("payment {} has amount {:?}", s.payment_id, s.amount))?;
            let forma = s
                .forma_pago
                .clone()
                .unwrap_or_else(|| self.default_forma_pago.clone());
            *by_forma.entry(forma).or_default() += amount;
            lines.push(LineData {
                clave_prod_serv: CLAVE_PROD_SERV.into(),
                no_identificacion: Some(reference(&s.payment_id)),
                cantidad: Decimal::ONE,
                clave_unidad: CLAVE_UNIDAD.into(),
                unidad: None,
                descripcion: DESCRIPCION.into(),
                unit_price: amount,
                discount: None,
                tax: self.tax,
                tax_amount: None,
                retenciones: Vec::new(),
            });
        }
        // SAT's guide: with several forms of payment, the one that paid the largest amount
        // (ties: the lowest code, so the choice never depends on reading order).
        let forma_pago = by_forma
            .iter()
            .fold(None::<(&String, Decimal)>, |best, (f, a)| match best {
                Some((_, b)) if b >= *a => best,
                _ => Some((f, *a)),
            })
            .map(|(f, _)| f.clone())
            .ok_or("a factura global needs at least one sale")?;
        Ok(InvoiceRequest {
            tipo: TipoComprobante::Ingreso,
            serie: Some(self.settings.serie.clone()),
            // Replaced by the folio the outbox allocates.
            folio: Some("1".into()),
            fecha,
            moneda: moneda.to_owned(),
            tipo_cambio: tipo_cambio_of(moneda, sales)?,
            forma_pago,
            metodo_pago: "PUE".into(),
            condiciones_de_pago: None,
            exportacion: "01".into(),
            prices_include_tax: self.prices_include_tax,
            emisor: self.emisor.clone(),
            receptor: ReceptorData::PublicoEnGeneral,
            informacion_global: Some(InformacionGlobalData {
                periodicidad: period.periodicidad.code().into(),
                meses: period.meses(),
                anio: period.anio(),
            }),
            relacionados: replacing
                .map(|r| RelacionadosData {
                    tipo_relacion: "04".into(),
                    uuids: vec![r.uuid.to_uppercase()],
                })
                .into_iter()
                .collect(),
            lines,
            pago: None,
        })
    }

    /// The global `slot` over `sales`, ready to freeze; `Err` says why it cannot be built
    /// (nothing is frozen then).
    pub fn global(
        &self,
        slot: Slot<'_>,
        sales: &[Sale],
        fecha: NaiveDateTime,
        replacing: Option<Replacing<'_>>,
        actor: &str,
    ) -> Result<NewGlobal, String> {
        let Slot {
            period,
            moneda,
            seq,
        } = slot;
        let period = &period;
        let request = self.request(period, moneda, sales, fecha, replacing)?;
        // Building (no signing) checks the document and gives its Total.
        let built = cfdi::build(&request, "00000000000000000000").map_err(|e| e.to_string())?;
        let total = cfdi::money::fixed(built.total, built.moneda_decimals);
        let test_mode = sales.iter().any(|s| !s.livemode);
        let key = self.stamp_key(period, moneda, seq);
        let mismatch = sales.iter().find_map(|s| {
            crate::config::environment_mismatch(self.pac_env, self.sandbox_pac, s.livemode)
        });
        let (state, code, message) = match mismatch {
            Some((code, message)) => (
                DocumentState::NeedsAttention,
                Some(code.to_owned()),
                Some(message.to_owned()),
            ),
            None => (DocumentState::Pending, None, None),
        };
        let label = period.label();
        Ok(NewGlobal {
            identity: GlobalIdentity {
                rfc_emisor: self.emisor.rfc.to_string(),
                periodicidad: period.periodicidad.code().into(),
                period_start: period.start.to_string(),
                period_end: period.end.to_string(),
                moneda: moneda.to_owned(),
                seq,
            },
            members: sales.iter().map(|s| s.id).collect(),
            total: total.clone(),
            payment: NewPayment {
                provider: GLOBAL_PROVIDER.into(),
                payment_id: format!("{}:{}:{moneda}:{seq}", self.emisor.rfc, period.key()),
                event_id: key.to_string(),
                amount: total,
                currency: moneda.to_owned(),
                method: GLOBAL_PROVIDER.into(),
                forma_pago: Some(request.forma_pago.clone()),
                customer_json: "{}".into(),
                paid_at: crate::domain::time::from_local(period.closes_at())
                    .unwrap_or_else(Utc::now),
                livemode: !test_mode,
                status: PaymentStatus::InvoicePending,
                reason: Some(format!(
                    "factura global of {label} ({moneda}) #{seq}: {} sales",
                    sales.len()
                )),
                // Customers never look a global up at the portal.
                references: Vec::new(),
                lines_json: None,
                tipo_cambio: None,
                arca: None,
            },
            draft: OutboxDraft {
                kind: DocumentKind::Global,
                stamp_key: key,
                request,
                state,
                error_code: code,
                error_message: message,
                test_mode,
            },
            replaces: replacing.map(|r| r.outbox_id),
            actor: actor.to_owned(),
            member_reason: format!("in the factura global of {label} ({moneda})"),
            // Set by the caller that reduced the sales (see `issue::reduce`).
            reductions: 0,
        })
    }
}

/// The TipoCambio of a global in `moneda` over `sales`: none for MXN; otherwise the one rate
/// to MXN its sales carry (issue groups them by it). `Err` says why the global cannot have one
/// yet; its sales are held out of it meanwhile.
pub fn tipo_cambio_of(moneda: &str, sales: &[Sale]) -> Result<Option<Decimal>, String> {
    if moneda == "MXN" {
        return Ok(None);
    }
    let mut rates = sales.iter().map(|s| {
        s.tipo_cambio
            .as_deref()
            .and_then(|t| t.trim().parse::<Decimal>().ok())
            .filter(|t| *t > Decimal::ZERO)
    });
    let first = rates.next().flatten();
    match first {
        Some(rate) if rates.all(|r| r == Some(rate)) => Ok(Some(rate)),
        Some(_) => Err(format!(
            "its {moneda} sales carry different exchange rates to MXN; a global has one TipoCambio"
        )),
        None => Err(format!(
            "no exchange rate to MXN (TipoCambio) is known for these {moneda} sales"
        )),
    }
}

/// A sale's reference as `NoIdentificacion` allows it: at most 100 characters, no `|`.
fn reference(payment_id: &str) -> String {
    payment_id
        .chars()
        .map(|c| if c == '|' || c.is_control() { ' ' } else { c })
        .take(100)
        .collect::<String>()
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use chrono::{NaiveDate, TimeZone};

    use super::*;

    fn sale(id: i64, amount: &str, forma: &str) -> Sale {
        Sale {
            id,
            provider: "stripe".into(),
            payment_id: format!("pi_{id}"),
            amount: amount.into(),
            currency: "MXN".into(),
            forma_pago: Some(forma.into()),
            paid_at: Utc
                .with_ymd_and_hms(2026, 11, 10, 18, 0, 0)
                .single()
                .expect("time"),
            livemode: true,
            tipo_cambio: None,
        }
    }

    #[test]
    fn a_global_in_another_currency_takes_the_one_rate_its_sales_carry() {
        let usd = |id: i64, rate: Option<&str>| Sale {
            currency: "USD".into(),
            tipo_cambio: rate.map(str::to_owned),
            ..sale(id, "10.00", "04")
        };
        let p = Planner::new(&Settings::defaults().expect("settings")).expect("planner");
        let period = p.period_of(sale(1, "1", "04").paid_at);
        let sales = [usd(1, Some("17.2512")), usd(2, Some("17.2512"))];
        let r = p
            .request(&period, "USD", &sales, fecha(), None)
            .expect("request");
        assert_eq!(r.tipo_cambio, Some(Decimal::new(172512, 4)));
        assert_eq!(r.moneda, "USD");
        // MXN never has one, whatever a row says.
        let mxn = [Sale {
            tipo_cambio: Some("1".into()),
            ..sale(3, "10", "04")
        }];
        assert_eq!(tipo_cambio_of("MXN", &mxn), Ok(None));
        let missing = tipo_cambio_of("USD", &[usd(1, Some("17.25")), usd(2, None)]);
        assert!(
            missing
                .expect_err("held")
                .contains("different exchange rates")
        );
        let none = tipo_cambio_of("USD", &[usd(1, None)]);
        assert!(none.expect_err("held").contains("no exchange rate"));
    }

    fn slot(period: Period, seq: i32) -> Slot<'static> {
        Slot {
            period,
            moneda: "MXN",
            seq,
        }
    }

    fn fecha() -> NaiveDateTime {
        NaiveDate::from_ymd_opt(2026, 12, 1)
            .and_then(|d| d.and_hms_opt(1, 0, 0))
            .expect("fecha")
    }

    #[test]
    fn one_concepto_per_sale_to_publico_en_general_with_the_period() {
        let p = Planner::new(&Settings::defaults().expect("settings")).expect("planner");
        let period = p.period_of(sale(1, "1", "04").paid_at);
        assert_eq!(period.label(), "2026-11");
        let sales = [
            sale(1, "116.00", "04"),
            sale(2, "50.00", "28"),
            sale(3, "80.00", "28"),
        ];
        let g = p
            .global(slot(period, 1), &sales, fecha(), None, "test")
            .expect("global");
        let r = &g.draft.request;
        assert_eq!(r.receptor, ReceptorData::PublicoEnGeneral);
        assert_eq!(r.serie.as_deref(), Some("G"));
        assert_eq!(
            r.informacion_global,
            Some(InformacionGlobalData {
                periodicidad: "04".into(),
                meses: "11".into(),
                anio: 2026
            })
        );
        assert_eq!(r.lines.len(), 3);
        assert_eq!(r.lines[1].no_identificacion.as_deref(), Some("pi_2"));
        assert_eq!(
            (
                r.lines[0].clave_prod_serv.as_str(),
                r.lines[0].clave_unidad.as_str()
            ),
            ("01010101", "ACT")
        );
        // 28 paid 130.00, more than 04's 116.00.
        assert_eq!(r.forma_pago, "28");
        assert_eq!(g.total, "246.00");
        assert_eq!(g.members, vec![1, 2, 3]);
        assert_eq!(g.draft.kind, DocumentKind::Global);
        assert_eq!(g.draft.stamp_key, p.stamp_key(&period, "MXN", 1));
        assert_ne!(g.draft.stamp_key, p.stamp_key(&period, "MXN", 2));
        assert_ne!(g.draft.stamp_key, p.stamp_key(&period, "USD", 1));
    }

    #[test]
    fn a_replacement_relates_to_the_replaced_global_with_tipo_relacion_04() {
        let p = Planner::new(&Settings::defaults().expect("settings")).expect("planner");
        let period = p.period_of(sale(1, "1", "04").paid_at);
        let uuid = "5fb2822e-396d-4725-8521-cdc4bdd20ccf";
        let g = p
            .global(
                slot(period, 2),
                &[sale(1, "10", "04")],
                fecha(),
                Some(Replacing { outbox_id: 7, uuid }),
                "admin",
            )
            .expect("global");
        assert_eq!(g.replaces, Some(7));
        assert_eq!(
            g.draft.request.relacionados,
            vec![RelacionadosData {
                tipo_relacion: "04".into(),
                uuids: vec![uuid.to_uppercase()]
            }]
        );
    }

    #[test]
    fn a_global_of_max_conceptos_sales_stays_far_below_what_a_pac_accepts() {
        // docs/global.md: 1,000 conceptos make about 0.45 MB.
        let p = Planner::new(&Settings::defaults().expect("settings")).expect("planner");
        let sales: Vec<Sale> = (0..1000)
            .map(|i| Sale {
                payment_id: format!("pi_3Q{i:020}"),
                ..sale(i, "1160.99", "04")
            })
            .collect();
        let period = p.period_of(sales[0].paid_at);
        let g = p
            .global(slot(period, 1), &sales, fecha(), None, "test")
            .expect("global");
        let csd = crate::sandbox::csd().expect("test CSD");
        let sealed = cfdi::seal(&g.draft.request, &csd).expect("sealed");
        let kb = sealed.xml.len() / 1024;
        assert!((350..=600).contains(&kb), "{kb} KB for 1,000 conceptos");
    }

    #[test]
    fn meses_must_fit_the_periodicidad() {
        let p = Planner::new(&Settings::defaults().expect("settings")).expect("planner");
        let period = p.period_of(sale(1, "1", "04").paid_at);
        let mut r = p
            .request(&period, "MXN", &[sale(1, "10", "04")], fecha(), None)
            .expect("request");
        if let Some(g) = r.informacion_global.as_mut() {
            g.meses = "18".into();
        }
        let err = cfdi::build(&r, "00000000000000000000").expect_err("13-18 need 05");
        assert!(
            err.to_string().contains("does not fit Periodicidad"),
            "{err}"
        );
    }
}
