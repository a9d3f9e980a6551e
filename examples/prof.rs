use autofactura::cfdi::{self, InvoiceRequest};
use autofactura::pacsim::{Sim, faults::FaultSpec};
use std::time::Instant;
fn main() {
    let csd = autofactura::cli::sandbox_csd().unwrap();
    let (_, json) = autofactura::cli::SAMPLE_REQUESTS[0];
    let mut req: InvoiceRequest = serde_json::from_str(json).unwrap();
    req.fecha = autofactura::cli::now_in_mexico();
    let n = 2000;
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::open(&dir.path().join("j"), FaultSpec::default()).unwrap();
    let mut docs = Vec::new();
    let t = Instant::now();
    for i in 0..n {
        req.folio = Some(format!("{i}"));
        docs.push(cfdi::seal(&req, &csd).unwrap().xml);
    }
    println!(
        "seal {:.3} ms",
        t.elapsed().as_secs_f64() * 1000.0 / n as f64
    );
    println!("doc bytes {}", docs[0].len());
    let t = Instant::now();
    for d in &docs {
        sim.stamp(d, None).unwrap();
    }
    println!(
        "sim.stamp {:.3} ms",
        t.elapsed().as_secs_f64() * 1000.0 / n as f64
    );
}
