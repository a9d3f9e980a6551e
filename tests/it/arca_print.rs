//! The printable voucher (issue 21): a Mercado Pago sale in ARS, authorized by the sandbox ARCA
//! through the real server, printed by `autofactura arca pdf`; its text read back with poppler
//! and its QR decoded from the rendered page, then checked against what ARCA authorized.

use crate::arca_sales::{CUIT, PTO_VTA, arca_toml, authorized, fake_mp_ars, sim_vouchers};
use crate::support;

use std::sync::Arc;

use autofactura::arcasim::ArcaSim;
use autofactura::arcasim::server::start;
use base64::Engine;
use serde_json::Value;
use support::sales::mp_notify;
use support::{Backend, spawn_app_with};

fn arca_pdf(config: &std::path::Path, key: &str, out: &std::path::Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_autofactura"))
        .arg("--config")
        .arg(config)
        .args(["arca", "pdf", key, "--out"])
        .arg(out)
        .output()
        .expect("run autofactura arca pdf")
}

async fn an_authorized_voucher_prints_with_its_cae_and_arcas_qr(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = ArcaSim::open(&dir.path().join("arcasim.json")).expect("sim");
    let sim = start(Arc::new(sim), "127.0.0.1:0").expect("start the sandbox ARCA");
    let mp = fake_mp_ars();
    let toml = format!(
        "{}[arca.print]\nrazon_social = \"Almacén Ñandú S.R.L.\"\n\
         domicilio = \"Av. Corrientes 1234, CABA\"\ninicio_actividades = \"01/03/2019\"\n\
         qr_base = \"https://www.afip.gob.ar/fe/qr/\"\n[admin]\npassword = \"{}\"\n",
        arca_toml(&mp, sim.url()),
        support::admin::PASSWORD
    );
    let Some(app) = spawn_app_with(b, &toml).await else {
        return;
    };
    app.run_workers().await;
    let key = "mercadopago:7100000051";

    // Not issued yet: the command says so and writes nothing.
    let out = dir.path().join("voucher.pdf");
    let early = arca_pdf(&app.config_file, "mercadopago:404", &out);
    assert!(!early.status.success());
    assert!(
        String::from_utf8_lossy(&early.stderr).contains("no ARCA voucher"),
        "{}",
        String::from_utf8_lossy(&early.stderr)
    );
    assert!(!out.exists());

    mp_notify(&app, "n-ar-print", "payment.created", "7100000051").await;
    let v = authorized(&app.db, key).await;
    let cae = v.cae.clone().expect("CAE");
    let run = arca_pdf(&app.config_file, key, &out);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let pdf = std::fs::read(&out).expect("the PDF");

    let text = support::pdf::text(&pdf, None);
    let number = format!("{PTO_VTA:05}-{:08}", v.number);
    for want in [
        "FACTURA",
        "COD. 06",
        number.as_str(),
        "Almacén Ñandú S.R.L.",
        &format!("CUIT: {CUIT}"),
        "Condición frente al IVA: IVA Responsable Inscripto",
        "Consumidor final",
        "$ 1.210,00",
        "IVA contenido",
        "$ 210,00",
        &format!("CAE N°: {cae}"),
        "Comprobante autorizado por ARCA",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }

    // The QR: ARCA's address with the voucher as authorized (RG 4892).
    let codes = support::pdf::qr_codes(&pdf);
    assert_eq!(codes.len(), 1, "{codes:?}");
    let p = codes[0]
        .strip_prefix("https://www.afip.gob.ar/fe/qr/?p=")
        .unwrap_or_else(|| panic!("{}", codes[0]));
    let json: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(p)
            .expect("standard base64"),
    )
    .expect("JSON");
    let at_arca = sim_vouchers(sim.url()).await;
    assert_eq!(at_arca.len(), 1, "{at_arca:?}");
    let a = &at_arca[0];
    assert_eq!(json["ver"], 1);
    assert_eq!(json["fecha"], v.cbte_fch.as_str());
    assert_eq!(json["cuit"], CUIT);
    assert_eq!(json["ptoVta"], PTO_VTA);
    assert_eq!(json["tipoCmp"], 6);
    assert_eq!(json["nroCmp"], v.number);
    assert_eq!(json["moneda"], "PES");
    assert_eq!(json["ctz"], 1);
    assert_eq!(json["tipoCodAut"], "E");
    assert_eq!(json["codAut"].to_string(), a.cae);
    // An anonymous consumidor final carries no document in the QR.
    assert!(json.get("tipoDocRec").is_none(), "{json}");
    // The specification's order, as ARCA's reader expects it.
    let raw = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(p)
            .expect("base64"),
    )
    .expect("utf-8");
    let order: Vec<usize> = [
        "ver", "fecha", "cuit", "ptoVta", "tipoCmp", "nroCmp", "importe",
    ]
    .iter()
    .map(|k| raw.find(&format!("\"{k}\"")).expect(k))
    .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{raw}");
    // The amount exactly as authorized, to the centavo.
    assert!(
        raw.contains(&format!("\"importe\":{},", a.input.imp_total.normalize())),
        "{raw}"
    );
    // The dashboard counts the sale under its own state and sends the admin to its voucher.
    let browser = support::admin::Browser::new(&app);
    browser.login().await;
    let page = browser.get("/admin").await;
    assert_eq!(page.status, 200);
    let html = page.body;
    let tile = html
        .split("<a class=\"tile")
        .find(|t| t.contains("data-state=\"arca_authorized\""))
        .unwrap_or_else(|| panic!("no ARCA tile in\n{html}"));
    assert!(tile.contains("href=\"/admin/arca\""), "{tile}");
    assert!(tile.contains("ARCA voucher authorized"), "{tile}");
    sim.stop().await;
}

crate::on_both_backends!(an_authorized_voucher_prints_with_its_cae_and_arcas_qr);
