//! The customers of a chaos run who invoice their sale at the self-invoicing portal, while
//! instances are being killed: each looks the sale up by its reference and total, then sends
//! its fiscal data twice at once to two instances (a double click, two tabs), retrying until
//! one answers. The check then wants exactly one CFDI for each.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::check::{SaleKind, SentPayment};

/// What every simulated customer types (a persona física of the SAT's test data), as a
/// browser posts the form.
const FISCAL_DATA: &str = "rfc=XIQB891116QE4&razon_social=Berenice+Ximo+Quezada&\
    regimen_fiscal=612&codigo_postal=26015&uso_cfdi=G03&email=cliente%40example.mx";

const FORM: &str = "application/x-www-form-urlencoded";

/// The total of every chaos sale ([`crate::webhooks::stripe::sample_payment_intent`]).
const TOTAL: &str = "116.00";

/// Every [`SaleKind::Portal`] sale of `payments` invoiced by its customer at `targets`, at
/// most `concurrency` at a time, each given up at `give_up`. The customers who never got an
/// answer, with why.
pub async fn self_invoice_all(
    payments: &[SentPayment],
    targets: Arc<Vec<String>>,
    concurrency: usize,
    give_up: Instant,
) -> Vec<String> {
    let http = match reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(h) => h,
        Err(e) => return vec![format!("cannot build the HTTP client: {e}")],
    };
    let sem = Arc::new(Semaphore::new(concurrency.max(1)));
    let mut tasks = JoinSet::new();
    for (i, p) in payments
        .iter()
        .filter(|p| p.kind == SaleKind::Portal)
        .enumerate()
    {
        let Ok(permit) = sem.clone().acquire_owned().await else {
            break;
        };
        let (http, targets, id) = (http.clone(), targets.clone(), p.payment_id.clone());
        tasks.spawn(async move {
            let r = self_invoice(&http, &targets, i, &id, give_up).await;
            drop(permit);
            r.map_err(|e| format!("portal customer of {id}: {e}"))
        });
    }
    let mut errors = Vec::new();
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(e),
            Err(e) => errors.push(format!("portal customer task failed: {e}")),
        }
    }
    errors
}

/// One customer: look-up, then the fiscal form sent twice at once, until an instance takes it.
async fn self_invoice(
    http: &reqwest::Client,
    targets: &[String],
    first: usize,
    payment_id: &str,
    give_up: Instant,
) -> Result<(), String> {
    let mut attempt = 0usize;
    loop {
        let base = &targets[(first + attempt) % targets.len()];
        let why = match lookup(http, base, payment_id).await {
            Ok(page) => {
                let other = &targets[(first + attempt + 1) % targets.len()];
                let (a, b) = tokio::join!(submit(http, base, &page), submit(http, other, &page));
                match (a, b) {
                    (Ok(()), _) | (_, Ok(())) => return Ok(()),
                    (Err(e), _) => e,
                }
            }
            Err(e) => e,
        };
        if Instant::now() > give_up {
            return Err(format!(
                "no instance took it after {} tries; last: {why}",
                attempt + 1
            ));
        }
        attempt += 1;
        let pause = Duration::from_millis(200 * (attempt.min(10) as u64));
        tokio::time::sleep(pause).await;
    }
}

/// `POST /facturar`: the sale's page (`/facturar/{token}`), or why not (yet).
async fn lookup(http: &reqwest::Client, base: &str, payment_id: &str) -> Result<String, String> {
    let r = http
        .post(format!("{base}/facturar"))
        .header("Content-Type", FORM)
        // Payment ids are letters, digits and `_`: nothing to encode.
        .body(format!("reference={payment_id}&total={TOTAL}"))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let location = r
        .headers()
        .get("location")
        .and_then(|l| l.to_str().ok())
        .map(str::to_owned);
    match (r.status().as_u16(), location) {
        (303, Some(page)) => Ok(page),
        (status, _) => Err(format!("look-up answered {status}")),
    }
}

/// `POST /facturar/{token}` with the fiscal data; taken when answered with the way back to the
/// sale's page. A 422 would be this simulation's data refused: it never passes by retrying.
async fn submit(http: &reqwest::Client, base: &str, page: &str) -> Result<(), String> {
    let r = http
        .post(format!("{base}{page}"))
        .header("Content-Type", FORM)
        .body(FISCAL_DATA)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    match r.status().as_u16() {
        303 => Ok(()),
        status => Err(format!(
            "submit answered {status}: {}",
            r.text()
                .await
                .unwrap_or_default()
                .chars()
                .take(200)
                .collect::<String>()
        )),
    }
}
