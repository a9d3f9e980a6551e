//! The CFDI engine against the SAT's own tools: the XSD (xmllint), the cadena XSLT (xsltproc) and
//! an independent RSA verifier (openssl). Run through the real `autofactura` binary where a user
//! would.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use autofactura::cfdi::{self, Tfd, dom::Element};

const BIN: &str = env!("CARGO_BIN_EXE_autofactura");

pub(crate) fn sat() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/sat")
}

pub(crate) fn cfd() -> PathBuf {
    sat().join("schemas/www.sat.gob.mx/sitio_internet/cfd")
}

fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (scripts/test installs it)"))
}

pub(crate) fn autofactura(args: &[&str]) -> Output {
    run(Command::new(BIN).args(args))
}

fn xsltproc(xslt: &Path, xml: &Path) -> Vec<u8> {
    let out = run(Command::new("xsltproc").arg("--nonet").arg(xslt).arg(xml));
    assert!(
        out.status.success(),
        "xsltproc failed on {}: {}",
        xml.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

pub(crate) fn sat_cadena(xml: &Path) -> Vec<u8> {
    xsltproc(
        &cfd().join("4/cadenaoriginal_4_0/cadenaoriginal_4_0.xslt"),
        xml,
    )
}

pub(crate) fn xmllint(schema: &Path, xml: &Path) {
    let out = run(Command::new("xmllint")
        .args(["--nonet", "--noout", "--schema"])
        .arg(schema)
        .arg(xml));
    assert!(
        out.status.success(),
        "{} is not valid against {}: {}",
        xml.display(),
        schema.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes the samples with a fixed Fecha and returns their paths.
fn samples(dir: &Path) -> Vec<PathBuf> {
    let out = autofactura(&[
        "cfdi",
        "sample",
        "--out",
        dir.to_str().expect("utf-8 path"),
        "--fecha",
        "2026-11-30T09:15:00",
    ]);
    assert!(
        out.status.success(),
        "cfdi sample failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("sample dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "xml"))
        .collect();
    paths.sort();
    assert_eq!(
        paths.len(),
        autofactura::sandbox::SAMPLE_REQUESTS.len(),
        "one XML per sample request"
    );
    paths
}

/// Stamps a sealed document with a TFD signed by the test CSD, as a PAC would.
pub(crate) fn stamp(sealed: &[u8]) -> Vec<u8> {
    let pac = autofactura::sandbox::csd().expect("test CSD");
    let root = Element::parse(sealed).expect("parse");
    let tfd = Tfd::issue(
        &root,
        "5fb2822e-396d-4725-8521-cdc4bdd20ccf",
        "2026-11-30T09:16:02",
        "SPR190613I52",
        &pac,
    )
    .expect("tfd");
    cfdi::tfd::attach(sealed, &tfd).expect("attach")
}

#[test]
fn every_sample_validates_against_the_sat_schema() {
    let dir = tempfile::tempdir().expect("tempdir");
    for path in samples(dir.path()) {
        // A pago carries its Pagos 2.0 complemento before any stamp: cfdv40.xsd alone cannot
        // judge it (its Complemento is a strict wildcard).
        let sealed_pagos = std::fs::read_to_string(&path)
            .expect("read")
            .contains("pago20:Pagos");
        if sealed_pagos {
            xmllint(&sat().join("schemas/cfdi40-con-complementos.xsd"), &path);
        } else {
            xmllint(&cfd().join("4/cfdv40.xsd"), &path);
        }
        let stamped = dir.path().join("stamped.xml");
        std::fs::write(&stamped, stamp(&std::fs::read(&path).expect("read"))).expect("write");
        xmllint(&sat().join("schemas/cfdi40-con-complementos.xsd"), &stamped);
    }
}

#[test]
fn our_cadena_is_the_sat_xslt_cadena_byte_for_byte() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut docs = samples(dir.path());
    // A stamped document (the TFD must not enter the cadena) and a Pagos 2.0 complemento.
    let stamped = dir.path().join("zz-stamped.xml");
    std::fs::write(&stamped, stamp(&std::fs::read(&docs[0]).expect("read"))).expect("write");
    docs.push(stamped);
    docs.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/cfdi/pagos20.xml"));
    docs.push(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/cfdi/whitespace-and-escapes.xml"),
    );
    for path in docs {
        let ours = autofactura(&["cfdi", "cadena", path.to_str().expect("utf-8")]);
        assert!(
            ours.status.success(),
            "cfdi cadena failed: {}",
            String::from_utf8_lossy(&ours.stderr)
        );
        let theirs = sat_cadena(&path);
        assert_eq!(
            String::from_utf8_lossy(&ours.stdout),
            String::from_utf8_lossy(&theirs),
            "cadena of {} differs from the SAT XSLT",
            path.display()
        );
    }
}

#[test]
fn tfd_cadena_matches_the_sat_tfd_xslt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = &samples(dir.path())[0];
    let stamped = stamp(&std::fs::read(first).expect("read"));
    let stamped_path = dir.path().join("stamped.xml");
    std::fs::write(&stamped_path, &stamped).expect("write");
    let ours = autofactura(&[
        "cfdi",
        "cadena",
        "--tfd",
        stamped_path.to_str().expect("utf-8"),
    ]);
    assert!(ours.status.success());
    // The TFD XSLT reads a document whose root is the TFD.
    let tfd = Tfd::from_comprobante(&Element::parse(&stamped).expect("parse")).expect("tfd");
    let tfd_path = dir.path().join("tfd.xml");
    std::fs::write(&tfd_path, cfdi::xml::tfd_to_xml(&tfd)).expect("write");
    let theirs = xsltproc(
        &cfd().join("TimbreFiscalDigital/cadenaoriginal_TFD_1_1.xslt"),
        &tfd_path,
    );
    assert_eq!(
        String::from_utf8_lossy(&ours.stdout),
        String::from_utf8_lossy(&theirs)
    );
    assert!(
        String::from_utf8_lossy(&theirs).starts_with("||1.1|5FB2822E-396D-4725-8521-CDC4BDD20CCF|")
    );
}

#[test]
fn openssl_verifies_our_sello() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cer = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/csd/EKU9003173C9.cer");
    let pubkey = dir.path().join("pub.pem");
    let out = run(Command::new("openssl")
        .args(["x509", "-inform", "DER", "-pubkey", "-noout", "-in"])
        .arg(&cer));
    assert!(out.status.success());
    std::fs::write(&pubkey, out.stdout).expect("write");
    for path in samples(dir.path()) {
        let xml = std::fs::read(&path).expect("read");
        let root = Element::parse(&xml).expect("parse");
        let sello = root.attr("Sello").expect("Sello");
        let sig = base64_decode(sello);
        let sig_path = dir.path().join("sig.bin");
        let cadena_path = dir.path().join("cadena.txt");
        std::fs::write(&sig_path, sig).expect("write");
        std::fs::write(&cadena_path, sat_cadena(&path)).expect("write");
        let out = run(Command::new("openssl")
            .args(["dgst", "-sha256", "-verify"])
            .arg(&pubkey)
            .arg("-signature")
            .arg(&sig_path)
            .arg(&cadena_path));
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("Verified OK"),
            "openssl rejects the Sello of {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .expect("base64")
}

#[test]
fn verify_accepts_samples_and_reports_the_stamp() {
    let dir = tempfile::tempdir().expect("tempdir");
    let paths = samples(dir.path());
    for path in &paths {
        let out = autofactura(&["cfdi", "verify", path.to_str().expect("utf-8")]);
        assert!(
            out.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let stamped_path = dir.path().join("stamped.xml");
    std::fs::write(
        &stamped_path,
        stamp(&std::fs::read(&paths[0]).expect("read")),
    )
    .expect("write");
    let out = autofactura(&["cfdi", "verify", stamped_path.to_str().expect("utf-8")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("UUID: 5FB2822E-396D-4725-8521-CDC4BDD20CCF"),
        "{stdout}"
    );
    assert!(
        stdout.contains("FechaTimbrado: 2026-11-30T09:16:02"),
        "{stdout}"
    );
}

/// The text of the first sample comprobante, written under `dir`.
fn first_sample(dir: &Path) -> String {
    let path = &samples(dir)[0];
    String::from_utf8(std::fs::read(path).expect("read")).expect("utf-8")
}

/// `cfdi verify` of `xml` (written to `dir/bad.xml`): it must fail with exit code 1. Its output.
fn verify_fails(dir: &Path, xml: &str) -> String {
    let bad = dir.join("bad.xml");
    std::fs::write(&bad, xml).expect("write");
    let out = autofactura(&["cfdi", "verify", bad.to_str().expect("utf-8")]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    stdout
}

#[test]
fn a_tampered_amount_fails_verify_with_the_sat_codes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let xml = first_sample(dir.path());
    let total = Element::parse(xml.as_bytes())
        .expect("parse")
        .attr("Total")
        .expect("Total")
        .to_owned();
    let tampered = xml.replacen(&format!("Total=\"{total}\""), "Total=\"1.00\"", 1);
    assert_ne!(tampered, xml);
    let stdout = verify_fails(dir.path(), &tampered);
    assert!(
        stdout.lines().any(|l| l.starts_with("CFDI40119:")),
        "{stdout}"
    );
    assert!(
        stdout.lines().any(|l| l.starts_with("CFDI40102:")),
        "{stdout}"
    );

    // A line amount changed: the subtotal no longer adds up.
    let line_tampered = xml.replacen("Importe=\"499.00\"", "Importe=\"498.00\"", 1);
    assert_ne!(line_tampered, xml);
    let stdout = verify_fails(dir.path(), &line_tampered);
    assert!(
        stdout.lines().any(|l| l.starts_with("CFDI40108:")),
        "{stdout}"
    );
}

#[test]
fn a_swapped_certificate_fails_verify() {
    let dir = tempfile::tempdir().expect("tempdir");
    let xml = first_sample(dir.path());
    let root = Element::parse(xml.as_bytes()).expect("parse");
    let other = std::fs::read(sat().join("certs/legacy-2019/XIQB891116QE4/XIQB891116QE4_csd.cer"))
        .expect("cert");
    let other = cfdi::Certificate::from_bytes(&other).expect("cert");
    let swapped = xml.replacen(
        root.attr("Certificado").expect("Certificado"),
        other.base64(),
        1,
    );
    let stdout = verify_fails(dir.path(), &swapped);
    assert!(
        stdout.contains("CFDI40102: the Sello does not verify"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "NoCertificado 30001000000500003416 is not the serial of the embedded certificate"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("not the certificate holder's RFC"),
        "{stdout}"
    );
}

#[test]
fn cadena_prints_only_the_cadena_and_fails_clearly_on_bad_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = &samples(dir.path())[0];
    let out = autofactura(&["cfdi", "cadena", path.to_str().expect("utf-8")]);
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        stdout.starts_with("||4.0|A|101|2026-11-30T09:15:00|04|30001000000500003416|"),
        "{stdout}"
    );
    assert!(stdout.ends_with("||") && !stdout.ends_with("\n"));
    let junk = dir.path().join("junk.xml");
    std::fs::write(&junk, "<a><b></a>").expect("write");
    let out = autofactura(&["cfdi", "cadena", junk.to_str().expect("utf-8")]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("malformed XML"));
}

#[test]
fn the_same_request_always_yields_the_same_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = samples(&dir.path().join("a"));
    let b = samples(&dir.path().join("b"));
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(
            std::fs::read(x).expect("read"),
            std::fs::read(y).expect("read"),
            "{}",
            x.display()
        );
    }
}

#[test]
fn sample_without_fecha_uses_the_current_time_in_mexico_city() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = autofactura(&[
        "cfdi",
        "sample",
        "--out",
        dir.path().to_str().expect("utf-8"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let xml = std::fs::read(dir.path().join("01-iva16-mxn.xml")).expect("read");
    let fecha = Element::parse(&xml)
        .expect("parse")
        .attr("Fecha")
        .expect("Fecha")
        .to_owned();
    let fecha = cfdi::verify::parse_fecha(&fecha).expect("fecha");
    let now = autofactura::domain::time::now_in_mexico();
    assert!(
        (now - fecha).num_seconds().abs() < 120,
        "Fecha {fecha} is not now ({now}) in Mexico City"
    );
}

/// A clone of this repository alone must pass: no source, script, test or document reads a path
/// beside the checkout (the reference material the tests use is vendored in `fixtures/sat`).
#[test]
fn nothing_in_the_repository_reads_outside_it() {
    fn walk(dir: &Path, hits: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if path.is_dir() {
                // Build output and git internals are not the repository's content.
                if !matches!(
                    name.to_str(),
                    Some("target" | ".git" | "corpus" | "artifacts")
                ) {
                    walk(&path, hits);
                }
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue; // binary files (certificates, images)
            };
            for (n, line) in text.lines().enumerate() {
                // Spelled in two halves so that this file does not match itself.
                if [concat!("..", "/shared"), concat!("shared", "/sat/")]
                    .iter()
                    .any(|p| line.contains(p))
                {
                    hits.push(format!("{}:{}: {line}", path.display(), n + 1));
                }
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut hits = Vec::new();
    for dir in [
        "src",
        "tests",
        "benches",
        "fuzz",
        "scripts",
        ".ci",
        "docs",
        "fixtures",
        "templates",
    ] {
        walk(&root.join(dir), &mut hits);
    }
    for file in [
        "README.md",
        "Cargo.toml",
        "Dockerfile",
        "fly.toml",
        "BENCHMARKS.md",
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
        if text.contains(concat!("..", "/shared")) {
            hits.push(file.to_string());
        }
    }
    assert!(
        hits.is_empty(),
        "paths outside the repository:\n{}",
        hits.join("\n")
    );
}
