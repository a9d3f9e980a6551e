use autofactura::cfdi::{self, InvoiceRequest};
use autofactura::pac::{self, PacConfig};
use autofactura::pacsim::{Sandbox, faults::FaultSpec};
use std::time::Instant;
#[tokio::main]
async fn main() {
    let csd = autofactura::cli::sandbox_csd().unwrap();
    let (_, json) = autofactura::cli::SAMPLE_REQUESTS[0];
    let mut req: InvoiceRequest = serde_json::from_str(json).unwrap();
    req.fecha = autofactura::cli::now_in_mexico();
    let dir = tempfile::tempdir().unwrap();
    let lat: u64 = std::env::args().nth(1).map_or(50, |a| a.parse().unwrap());
    let (url, _h) = Sandbox::start_in_process(
        &dir.path().join("j"),
        FaultSpec::parse(&format!("latency={lat}ms")).unwrap(),
    )
    .await
    .unwrap();
    let cfg = PacConfig {
        url: Some(url),
        user: Some("sandbox".into()),
        password: Some("sandbox".into()),
        ..PacConfig::default()
    };
    let c = pac::connect(&cfg).await.unwrap().client;
    let mut ts = Vec::new();
    for i in 0..60 {
        req.folio = Some(format!("{i}"));
        let x = cfdi::seal(&req, &csd).unwrap().xml;
        let key = autofactura::domain::StampKey::parse(&format!("af1-{i:040x}")).unwrap();
        let t = Instant::now();
        let out = c.stamp(&x, &key).await;
        ts.push(t.elapsed().as_secs_f64() * 1000.0);
        if i == 0 {
            println!(
                "{}",
                match &out {
                    pac::StampOutcome::Stamped(_) => "stamped".to_string(),
                    o => format!("{o:?}").chars().take(300).collect(),
                }
            );
        }
    }
    ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("p10 {:.2} p50 {:.2} p90 {:.2}", ts[6], ts[30], ts[54]);
}
