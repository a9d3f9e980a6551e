use autofactura::cfdi::{self, InvoiceRequest};
use autofactura::pac::{self, PacConfig};
use autofactura::pacsim::{Sandbox, faults::FaultSpec};
use std::sync::Arc;
use std::time::{Duration, Instant};
#[tokio::main]
async fn main() {
    let csd = Arc::new(autofactura::cli::sandbox_csd().unwrap());
    let (_, json) = autofactura::cli::SAMPLE_REQUESTS[0];
    let mut req: InvoiceRequest = serde_json::from_str(json).unwrap();
    req.fecha = autofactura::cli::now_in_mexico();
    let dir = tempfile::tempdir().unwrap();
    let w: usize = std::env::args().nth(1).map_or(32, |a| a.parse().unwrap());
    let seal: bool = std::env::args().nth(2).is_some();
    let (url, _h) = Sandbox::start_in_process(
        &dir.path().join("j"),
        FaultSpec::parse("latency=50ms").unwrap(),
    )
    .await
    .unwrap();
    let cfg = PacConfig {
        url: Some(url),
        user: Some("sandbox".into()),
        password: Some("sandbox".into()),
        ..PacConfig::default()
    };
    let c = Arc::new(pac::connect(&cfg).await.unwrap().client);
    let docs: Vec<Vec<u8>> = (0..3000)
        .map(|i| {
            let mut r = req.clone();
            r.folio = Some(format!("{i}"));
            cfdi::seal(&r, &csd).unwrap().xml
        })
        .collect();
    let docs = Arc::new(docs);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..w {
        let (c, docs, next, csd, req) = (
            c.clone(),
            docs.clone(),
            next.clone(),
            csd.clone(),
            req.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= docs.len() {
                    break;
                }
                if seal {
                    let (csd, req) = (csd.clone(), req.clone());
                    tokio::task::spawn_blocking(move || cfdi::seal(&req, &csd))
                        .await
                        .unwrap()
                        .unwrap();
                }
                let key = autofactura::domain::StampKey::parse(&format!("af1-{i:040x}")).unwrap();
                let t = Instant::now();
                let _ = c.stamp(&docs[i], &key).await;
                lat.push(t.elapsed());
            }
            lat
        }));
    }
    let mut all: Vec<Duration> = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let secs = start.elapsed().as_secs_f64();
    all.sort();
    println!(
        "w={w} seal={seal} rate {:.0}/s ratio {:.3} p50 {:?} p90 {:?}",
        3000.0 / secs,
        3000.0 / secs / (w as f64 / 0.05),
        all[all.len() / 2],
        all[all.len() * 9 / 10]
    );
}
