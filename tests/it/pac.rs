//! PAC clients against the sandbox PAC over real HTTP (the SW adapter against its REST shape, the
//! Finkok adapter against its SOAP shape and against SOAP fixtures), the sandbox's checks (XSD
//! facets and catalogs included), faults, persistence and the failover rule.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use autofactura::cfdi::{self, InvoiceRequest, cadena::cadena_comprobante, dom::Element};
use autofactura::domain::StampKey;
use autofactura::domain::time::now_in_mexico;
use autofactura::pac::failover::MemoryLog;
use autofactura::pac::{
    CancelOutcome, CancelRequest, Failover, Motivo, PacClient, PacConfig, PacKind, Recovery, Route,
    StampOutcome, StatusOutcome, StatusQuery,
};
use autofactura::pacsim::faults::FaultSpec;
use autofactura::pacsim::{Sandbox, SandboxHandle};
use autofactura::sandbox::{SAMPLE_REQUESTS, csd as sandbox_csd};
use chrono::Duration as ChronoDuration;
use serde_json::Value;

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A fresh request (unique folio, Fecha a minute ago) from sample 01 (Total 578.84 MXN).
fn request() -> InvoiceRequest {
    let mut req: InvoiceRequest = serde_json::from_str(SAMPLE_REQUESTS[0].1).unwrap();
    req.folio = Some(format!(
        "T{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    ));
    req.fecha = now_in_mexico() - ChronoDuration::minutes(1);
    req
}

fn seal(req: &InvoiceRequest) -> Vec<u8> {
    cfdi::seal(req, &sandbox_csd().unwrap()).unwrap().xml
}

fn sealed() -> Vec<u8> {
    seal(&request())
}

fn key() -> StampKey {
    StampKey::derive(
        "test",
        &format!(
            "{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        ),
        "ingreso",
    )
}

/// Replaces an attribute of the root and re-seals with the test CSD, so only the edit is wrong.
fn edit_and_reseal(xml: &[u8], attr: &str, value: &str) -> Vec<u8> {
    let root = Element::parse(xml).unwrap();
    let old = format!(" {attr}=\"{}\"", root.attr(attr).unwrap());
    replace_and_reseal(xml, &old, &format!(" {attr}=\"{value}\""))
}

struct Sim {
    _dir: tempfile::TempDir,
    state: std::path::PathBuf,
    handle: SandboxHandle,
    /// The faults it started with.
    faults: String,
}

impl Sim {
    async fn start(faults: &str) -> Sim {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("pacsim.jsonl");
        let (_, handle) = Sandbox::start_in_process(&state, FaultSpec::parse(faults).unwrap())
            .await
            .unwrap();
        Sim {
            _dir: dir,
            state,
            handle,
            faults: faults.to_owned(),
        }
    }

    /// A client, and a fresh document it stamped.
    async fn client_and_stamp(&self) -> (PacClient, autofactura::pac::Stamp) {
        let client = self.client();
        let stamp = expect_stamped(client.stamp(&sealed(), &key()).await);
        (client, stamp)
    }

    fn url(&self) -> &str {
        self.handle.url()
    }

    fn client(&self) -> PacClient {
        client_for(self.url(), 5)
    }

    async fn stamps(&self) -> Vec<Value> {
        crate::support::sim::stamps(&reqwest::Client::new(), self.url()).await
    }

    async fn set_faults(&self, spec: &str) {
        crate::support::sim::set_faults(&reqwest::Client::new(), self.url(), spec).await;
    }

    async fn post(&self, path: &str) -> reqwest::StatusCode {
        reqwest::Client::new()
            .post(format!("{}{path}", self.url()))
            .send()
            .await
            .unwrap()
            .status()
    }

    async fn advance_seconds(&self, seconds: i64) {
        crate::support::sim::advance_clock(&reqwest::Client::new(), self.url(), seconds).await;
    }

    async fn advance_days(&self, days: i64) {
        self.advance_seconds(days * 86400).await;
    }
}

fn client_for(url: &str, timeout: u64) -> PacClient {
    let cfg = PacConfig {
        kind: PacKind::Sandbox,
        url: Some(url.to_owned()),
        request_timeout: timeout,
        connect_timeout: 2,
        ..PacConfig::default()
    };
    PacClient::from_config(&cfg).unwrap()
}

/// The kind of a failed stamp call and the HTTP status it carries.
fn failure_of(o: &StampOutcome) -> (&'static str, Option<u16>) {
    match o {
        StampOutcome::Retryable { http_status, .. } => ("retryable", *http_status),
        StampOutcome::Unknown { http_status, .. } => ("unknown", *http_status),
        other => panic!("expected Retryable or Unknown, got {other:?}"),
    }
}

/// Sets `faults` on `sim`, stamps a fresh document at `client`: the failure it gets.
async fn failure_under(sim: &Sim, client: &PacClient, faults: &str) -> (&'static str, Option<u16>) {
    sim.set_faults(faults).await;
    failure_of(&client.stamp(&sealed(), &key()).await)
}

/// Stamps a fresh document at `client` while `sim` loses the answer (its faults): unknown,
/// though the stamp was committed. Once `sim` runs with `healed` faults, recovery finds that
/// one stamp and stamps nothing. `by_content`: asks with a key of its own (Finkok sends none).
/// Returns the stamp's UUID.
async fn lost_then_recovered(
    sim: &Sim,
    client: &PacClient,
    healed: &str,
    by_content: bool,
) -> String {
    let (xml, k) = (sealed(), key());
    let spec = &sim.faults;
    assert_eq!(
        failure_of(&client.stamp(&xml, &k).await).0,
        "unknown",
        "{spec}"
    );
    let committed = sim.stamps().await;
    assert_eq!(
        committed.len(),
        1,
        "{spec}: the stamp was committed before the answer was lost"
    );
    let uuid = committed[0]["uuid"].as_str().unwrap().to_owned();
    sim.set_faults(healed).await;
    let asked_with = if by_content { key() } else { k };
    match client.recover_by_key(&xml, &asked_with).await {
        Recovery::Found(s) => assert_eq!(s.uuid, uuid, "{spec}"),
        other => panic!("{spec}: expected Found, got {other:?}"),
    }
    assert_eq!(
        sim.stamps().await.len(),
        1,
        "{spec}: recovering stamps nothing"
    );
    uuid
}

fn expect_stamped(o: StampOutcome) -> autofactura::pac::Stamp {
    match o {
        StampOutcome::Stamped(s) => s,
        other => panic!("expected Stamped, got {other:?}"),
    }
}

/// The PAC answered with the stamp it had already issued (`first`), for the same content.
fn expect_same_stamp(o: StampOutcome, first: &autofactura::pac::Stamp) {
    match o {
        StampOutcome::AlreadyStamped {
            stamp,
            same_content,
        } => {
            assert!(same_content);
            assert_eq!(&stamp, first);
        }
        other => panic!("expected AlreadyStamped, got {other:?}"),
    }
}

#[tokio::test]
async fn a_stamp_is_a_valid_cfdi_with_a_tfd_the_sandbox_certificate_verifies() {
    let sim = Sim::start("").await;
    let xml = sealed();
    let stamp = expect_stamped(sim.client().stamp(&xml, &key()).await);
    assert!(stamp.belongs_to(&xml));
    assert_eq!(stamp.uuid, stamp.uuid.to_uppercase());
    let certs = autofactura::cli::known_tfd_certificates();
    let report = cfdi::verify::verify(
        &stamp.xml,
        &cfdi::verify::VerifyOptions { tfd_certs: &certs },
    );
    assert!(report.is_valid(), "{:?}", report.problems);
    assert!(
        report.notes.is_empty(),
        "the SelloSAT must be checked: {:?}",
        report.notes
    );
    assert_eq!(report.uuid.as_deref(), Some(stamp.uuid.as_str()));
    let tfd_cadena = stamp.tfd.cadena().unwrap();
    assert!(
        tfd_cadena.starts_with(&format!("||1.1|{}|", stamp.uuid)),
        "{tfd_cadena}"
    );
}

#[tokio::test]
async fn the_embedded_default_runs_the_sandbox_in_process() {
    let dir = tempfile::tempdir().unwrap();
    let cfg: PacConfig = toml::from_str(&format!(
        "sandbox_state = {:?}",
        dir.path().join("state.jsonl").display().to_string()
    ))
    .unwrap();
    let connected = autofactura::startup::connect_pac(&cfg).await.unwrap();
    let sandbox = connected.sandbox.expect("an in-process sandbox");
    let stamp = expect_stamped(connected.client.stamp(&sealed(), &key()).await);
    assert_eq!(sandbox.sim().stamps()[0].uuid, stamp.uuid);
    let status = connected
        .client
        .sat_status(&StatusQuery::from_stamped_xml(&stamp.xml).unwrap())
        .await;
    assert!(matches!(status, StatusOutcome::Found(s) if s.estado == "Vigente"));
}

#[tokio::test]
async fn the_same_bytes_and_key_again_get_307_with_the_original_and_no_second_stamp() {
    let sim = Sim::start("").await;
    let (xml, k) = (sealed(), key());
    let first = expect_stamped(sim.client().stamp(&xml, &k).await);
    for other_key in [k.clone(), key()] {
        match sim.client().stamp(&xml, &other_key).await {
            StampOutcome::AlreadyStamped {
                stamp,
                same_content,
            } => {
                assert!(same_content);
                assert_eq!(stamp.uuid, first.uuid);
                assert_eq!(stamp.xml, first.xml);
            }
            other => panic!("expected AlreadyStamped, got {other:?}"),
        }
    }
    let stamps = sim.stamps().await;
    assert_eq!(stamps.len(), 1);
    assert_eq!(stamps[0]["uuid"], first.uuid.as_str());
    assert_eq!(stamps[0]["customid"], k.as_str());
    assert_eq!(stamps[0]["cadena_sha256"].as_str().unwrap().len(), 64);
}

#[tokio::test]
async fn a_key_reused_for_other_content_gets_cfdi3307_and_the_original_fetched_by_uuid() {
    let sim = Sim::start("").await;
    let k = key();
    let first = expect_stamped(sim.client().stamp(&sealed(), &k).await);
    let other = sealed();
    match sim.client().stamp(&other, &k).await {
        StampOutcome::AlreadyStamped {
            stamp,
            same_content,
        } => {
            assert!(!same_content, "CFDI3307 must be flagged as other content");
            assert_eq!(stamp.uuid, first.uuid);
            assert_eq!(stamp.xml, first.xml, "the XML was fetched by UUID");
        }
        o => panic!("expected AlreadyStamped, got {o:?}"),
    }
    assert_eq!(sim.stamps().await.len(), 1);
    // Past the customid window the key is free again.
    sim.set_faults("customid_window=1h").await;
    sim.advance_days(1).await;
    let other = seal(&InvoiceRequest {
        fecha: now_in_mexico() + ChronoDuration::days(1) - ChronoDuration::minutes(1),
        ..request()
    });
    assert!(matches!(
        sim.client().stamp(&other, &k).await,
        StampOutcome::Stamped(_)
    ));
}

async fn rejected(sim: &Sim, xml: &[u8]) -> (String, String) {
    match sim.client().stamp(xml, &key()).await {
        StampOutcome::Rejected { code, message, .. } => (code, message),
        other => panic!("expected Rejected, got {other:?}"),
    }
}

#[tokio::test]
async fn tampered_documents_are_rejected_with_the_codes_a_pac_uses() {
    let sim = Sim::start("").await;
    let xml = sealed();
    let text = String::from_utf8(xml.clone()).unwrap();
    let root = Element::parse(&xml).unwrap();

    // The content changed after sealing: the Sello no longer verifies.
    let total = root.attr("Total").unwrap();
    let tampered = text.replacen(&format!("Total=\"{total}\""), "Total=\"1.00\"", 1);
    let (code, message) = rejected(&sim, tampered.as_bytes()).await;
    assert_eq!(code, "CFDI40102");
    assert!(message.starts_with("CFDI40102 - "), "{message}");

    // Re-sealed with wrong sums: the validator's codes.
    assert_eq!(
        rejected(&sim, &edit_and_reseal(&xml, "Total", "579.84"))
            .await
            .0,
        "CFDI40119"
    );
    assert_eq!(
        rejected(&sim, &edit_and_reseal(&xml, "SubTotal", "500.00"))
            .await
            .0,
        "CFDI40108"
    );

    // Fecha older than 72 hours, or in the future.
    let old = now_in_mexico() - ChronoDuration::hours(73);
    assert_eq!(
        rejected(
            &sim,
            &seal(&InvoiceRequest {
                fecha: old,
                ..request()
            })
        )
        .await
        .0,
        "401"
    );
    let future = now_in_mexico() + ChronoDuration::hours(2);
    assert_eq!(
        rejected(
            &sim,
            &seal(&InvoiceRequest {
                fecha: future,
                ..request()
            })
        )
        .await
        .0,
        "401"
    );

    // Not a CFDI at all; a missing required attribute.
    assert_eq!(rejected(&sim, b"<not-xml").await.0, "301");
    let no_lugar = text.replacen(" LugarExpedicion=\"42501\"", "", 1);
    assert_eq!(rejected(&sim, no_lugar.as_bytes()).await.0, "301");

    // NoCertificado that is not the certificate's serial.
    assert_eq!(
        rejected(
            &sim,
            &edit_and_reseal(&xml, "NoCertificado", "30001000000500003417")
        )
        .await
        .0,
        "303"
    );
    assert!(sim.stamps().await.is_empty());
}

#[tokio::test]
async fn refusals_before_processing_are_retryable() {
    let sim = Sim::start("").await;
    let client = sim.client();
    for faults in ["status503=1", "outage=0s..1h"] {
        let got = failure_under(&sim, &client, faults).await;
        assert_eq!(got, ("retryable", Some(503)), "{faults}");
    }
    sim.set_faults("status429=1:retry_after=7").await;
    match sim.client().stamp(&sealed(), &key()).await {
        StampOutcome::Retryable {
            retry_after,
            http_status,
            ..
        } => {
            assert_eq!(retry_after, Some(Duration::from_secs(7)));
            assert_eq!(http_status, Some(429));
        }
        other => panic!("expected Retryable, got {other:?}"),
    }
    assert!(sim.stamps().await.is_empty());

    // A port that refuses: connection refused.
    let (_down, addr) = crate::support::refusing_port();
    let refused = client_for(&format!("http://{addr}"), 5);
    let got = failure_of(&refused.stamp(&sealed(), &key()).await);
    assert_eq!(got, ("retryable", None));
}

#[tokio::test]
async fn a_500_or_a_reset_may_hide_a_stamp_so_it_is_unknown() {
    let sim = Sim::start("").await;
    let client = sim.client();
    for (faults, status) in [("status500=1", Some(500)), ("reset=1", None)] {
        let got = failure_under(&sim, &client, faults).await;
        assert_eq!(got, ("unknown", status), "{faults}");
    }
}

#[tokio::test]
async fn a_lost_response_is_unknown_and_recover_by_key_returns_the_one_stamp() {
    for spec in [
        "lose_response=1",
        "lose_response=1:mode=hang:hang=5s",
        "malformed=1",
    ] {
        let sim = Sim::start(spec).await;
        lost_then_recovered(&sim, &client_for(sim.url(), 2), "", false).await;
    }
}

#[tokio::test]
async fn recover_by_uuid_finds_not_found_and_unavailable() {
    let sim = Sim::start("").await;
    let stamp = expect_stamped(sim.client().stamp(&sealed(), &key()).await);
    match sim
        .client()
        .recover_by_uuid(&stamp.uuid, "EKU9003173C9")
        .await
    {
        Recovery::Found(s) => assert_eq!(s, stamp),
        other => panic!("expected Found, got {other:?}"),
    }
    let unknown = "00000000-0000-4000-8000-000000000000";
    assert_eq!(
        sim.client().recover_by_uuid(unknown, "EKU9003173C9").await,
        Recovery::NotFound
    );
    sim.set_faults("recover_unavailable=1").await;
    assert!(matches!(
        sim.client()
            .recover_by_uuid(&stamp.uuid, "EKU9003173C9")
            .await,
        Recovery::Unresolved { .. }
    ));
}

#[tokio::test]
async fn an_expired_token_is_renewed_transparently() {
    let sim = Sim::start("token_ttl=1h").await;
    let client = sim.client();
    expect_stamped(client.stamp(&sealed(), &key()).await);
    // Two hours later (sandbox time) the cached token is dead; the client logs in again. The
    // document must be fresh relative to the moved clock.
    sim.advance_seconds(7200).await;
    let later = seal(&InvoiceRequest {
        fecha: now_in_mexico() + ChronoDuration::hours(2) - ChronoDuration::minutes(1),
        ..request()
    });
    expect_stamped(client.stamp(&later, &key()).await);

    let bad = PacConfig {
        kind: PacKind::Sw,
        url: Some(sim.url().to_owned()),
        user: Some("sandbox".into()),
        password: Some("wrong".into()),
        ..PacConfig::default()
    };
    let bad = PacClient::from_config(&bad).unwrap();
    assert!(matches!(
        bad.stamp(&sealed(), &key()).await,
        StampOutcome::Retryable { .. }
    ));
}

#[tokio::test]
async fn restarting_the_sandbox_keeps_its_stamps() {
    let sim = Sim::start("").await;
    let (xml, k) = (sealed(), key());
    let first = expect_stamped(sim.client().stamp(&xml, &k).await);
    let Sim {
        _dir,
        state,
        handle,
        faults,
    } = sim;
    handle.stop().await;
    let (url, handle) = Sandbox::start_in_process(&state, FaultSpec::default())
        .await
        .unwrap();
    let sim = Sim {
        _dir,
        state,
        handle,
        faults,
    };
    assert_eq!(sim.stamps().await.len(), 1);
    match client_for(&url, 5).stamp(&xml, &k).await {
        StampOutcome::AlreadyStamped { stamp, .. } => assert_eq!(stamp.uuid, first.uuid),
        other => panic!("expected AlreadyStamped after restart, got {other:?}"),
    }
}

/// Runs `autofactura pac-sim` and returns the child and its URL.
fn spawn_pac_sim(state: &Path) -> (std::process::Child, String) {
    crate::support::sim::spawn_sandbox("pac-sim", &["--state".as_ref(), state.as_os_str()])
}

#[tokio::test]
async fn the_pac_sim_command_survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.jsonl");
    let (xml, k) = (sealed(), key());
    let (mut child, url) = spawn_pac_sim(&state);
    let first = expect_stamped(client_for(&url, 5).stamp(&xml, &k).await);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let (mut child, url) = spawn_pac_sim(&state);
    let stamps = crate::support::sim::stamps(&reqwest::Client::new(), &url).await;
    assert_eq!(stamps[0]["uuid"], first.uuid.as_str());
    let again = client_for(&url, 5).stamp(&xml, &k).await;
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(again.stamp().map(|s| s.uuid.clone()), Some(first.uuid));
    assert!(matches!(
        again,
        StampOutcome::AlreadyStamped {
            same_content: true,
            ..
        }
    ));
}

fn cancel_req(uuid: &str, motivo: Motivo) -> CancelRequest {
    CancelRequest {
        rfc_emisor: "EKU9003173C9".into(),
        uuid: uuid.into(),
        motivo,
        folio_sustitucion: None,
    }
}

async fn status_of(
    client: &PacClient,
    stamp: &autofactura::pac::Stamp,
) -> autofactura::pac::SatStatus {
    match client
        .sat_status(&StatusQuery::from_stamped_xml(&stamp.xml).unwrap())
        .await
    {
        StatusOutcome::Found(s) => s,
        other => panic!("expected Found, got {other:?}"),
    }
}

/// A `Requested` answer's code, acuse and `EstatusCancelacion`.
fn requested(o: CancelOutcome) -> (String, String, Option<String>) {
    match o {
        CancelOutcome::Requested {
            code,
            acuse,
            estatus_cancelacion,
        } => (code, acuse, estatus_cancelacion),
        other => panic!("expected Requested, got {other:?}"),
    }
}

fn requested_code(o: CancelOutcome) -> String {
    let (code, acuse, _) = requested(o);
    assert!(acuse.contains("<EstatusUUID>"), "{acuse}");
    code
}

/// Asks `client` to cancel `uuid` for `motivo` (no replacement).
async fn cancel(client: &PacClient, uuid: &str, motivo: Motivo) -> CancelOutcome {
    client.cancel(&cancel_req(uuid, motivo)).await
}

/// Checks SAT's `Estado` and `EstatusCancelacion` of `stamp`.
async fn assert_cancel_status(
    client: &PacClient,
    stamp: &autofactura::pac::Stamp,
    want: (&str, &str),
) {
    let st = status_of(client, stamp).await;
    let got = (st.estado.as_str(), st.estatus_cancelacion.as_str());
    assert_eq!(got, want, "{}", stamp.uuid);
}

#[tokio::test]
async fn a_small_invoice_cancels_without_acceptance() {
    let sim = Sim::start("").await;
    let (client, stamp) = sim.client_and_stamp().await;
    let before = status_of(&client, &stamp).await;
    assert_eq!(
        (before.estado.as_str(), before.es_cancelable.as_str()),
        ("Vigente", "Cancelable sin aceptación")
    );
    for code in ["201", "202"] {
        let got = requested_code(cancel(&client, &stamp.uuid, Motivo::SinRelacion).await);
        assert_eq!(got, code);
        assert_cancel_status(&client, &stamp, ("Cancelado", "Cancelado sin aceptación")).await;
    }
}

/// A stamped invoice over 1,000 MXN: seen days later, cancelling it needs acceptance.
async fn large_stamp(sim: &Sim) -> autofactura::pac::Stamp {
    let mut req = request();
    req.lines[0].unit_price = "5000.00".parse().unwrap();
    expect_stamped(sim.client().stamp(&seal(&req), &key()).await)
}

#[tokio::test]
async fn a_large_invoice_waits_for_the_receptor_who_accepts_rejects_or_lets_time_pass() {
    let sim = Sim::start("").await;
    let client = sim.client();
    let (accepted, rejected_, lapsed) = (
        large_stamp(&sim).await,
        large_stamp(&sim).await,
        large_stamp(&sim).await,
    );
    sim.advance_days(5).await;
    for s in [&accepted, &rejected_, &lapsed] {
        assert_eq!(
            status_of(&client, s).await.es_cancelable,
            "Cancelable con aceptación"
        );
        let code = requested_code(cancel(&client, &s.uuid, Motivo::SinRelacion).await);
        assert_eq!(code, "201");
        assert_cancel_status(&client, s, ("Vigente", "En proceso")).await;
    }
    let code = requested_code(cancel(&client, &accepted.uuid, Motivo::SinRelacion).await);
    assert_eq!(code, "202");
    assert_eq!(
        sim.post(&format!("/_sim/cancellations/{}/accept", accepted.uuid))
            .await,
        reqwest::StatusCode::NO_CONTENT
    );
    assert_eq!(
        sim.post(&format!("/_sim/cancellations/{}/reject", rejected_.uuid))
            .await,
        reqwest::StatusCode::NO_CONTENT
    );
    let accepted_status = ("Cancelado", "Cancelado con aceptación");
    assert_cancel_status(&client, &accepted, accepted_status).await;
    assert_cancel_status(&client, &rejected_, ("Vigente", "Solicitud rechazada")).await;
    sim.advance_days(6).await;
    assert_cancel_status(&client, &lapsed, ("Cancelado", "Plazo vencido")).await;
    // A second request after a rejection waits with no deadline.
    let code = requested_code(cancel(&client, &rejected_.uuid, Motivo::SinRelacion).await);
    assert_eq!(code, "201");
    sim.advance_days(10).await;
    assert_eq!(
        status_of(&client, &rejected_).await.estatus_cancelacion,
        "En proceso"
    );
}

#[tokio::test]
async fn cancellation_refusals_carry_the_sat_codes() {
    let sim = Sim::start("").await;
    let (client, stamp) = sim.client_and_stamp().await;
    let code = |o: CancelOutcome| match o {
        CancelOutcome::Rejected { code, .. } => code,
        other => panic!("expected Rejected, got {other:?}"),
    };
    let unknown = "00000000-0000-4000-8000-000000000000";
    assert_eq!(
        code(cancel(&client, unknown, Motivo::SinRelacion).await),
        "205"
    );
    let wrong_rfc = CancelRequest {
        rfc_emisor: "XIQB891116QE4".into(),
        ..cancel_req(&stamp.uuid, Motivo::SinRelacion)
    };
    assert_eq!(code(client.cancel(&wrong_rfc).await), "203");
    let no_folio = cancel(&client, &stamp.uuid, Motivo::ConRelacion).await;
    assert_eq!(code(no_folio), "301");

    // A live CFDI related to it makes it "No cancelable", except for its own replacement (01).
    let mut replacement = request();
    replacement.relacionados = vec![cfdi::RelacionadosData {
        tipo_relacion: "04".into(),
        uuids: vec![stamp.uuid.clone()],
    }];
    let replacement = expect_stamped(client.stamp(&seal(&replacement), &key()).await);
    let related = cancel(&client, &stamp.uuid, Motivo::SinRelacion).await;
    assert_eq!(code(related), "no_cancelable");
    let with_folio = CancelRequest {
        folio_sustitucion: Some(replacement.uuid.clone()),
        ..cancel_req(&stamp.uuid, Motivo::ConRelacion)
    };
    assert_eq!(requested_code(client.cancel(&with_folio).await), "201");

    // Right after stamping SAT does not know the UUID yet.
    sim.set_faults("ingest=16m").await;
    let fresh = expect_stamped(client.stamp(&sealed(), &key()).await);
    assert_eq!(
        code(cancel(&client, &fresh.uuid, Motivo::SinRelacion).await),
        "205"
    );
    let q = StatusQuery::from_stamped_xml(&fresh.xml).unwrap();
    assert!(
        matches!(client.sat_status(&q).await, StatusOutcome::NotFound { codigo_estatus } if codigo_estatus.starts_with("N - 602"))
    );
    sim.advance_seconds(1000).await;
    let later = cancel(&client, &fresh.uuid, Motivo::SinRelacion).await;
    assert_eq!(requested_code(later), "201");
}

#[tokio::test]
async fn the_status_service_checks_the_expression_and_can_be_down() {
    let sim = Sim::start("").await;
    let (client, stamp) = sim.client_and_stamp().await;
    let mut q = StatusQuery::from_stamped_xml(&stamp.xml).unwrap();
    assert!(matches!(
        client.sat_status(&q).await,
        StatusOutcome::Found(_)
    ));
    q.total = "1.00".into();
    assert!(
        matches!(client.sat_status(&q).await, StatusOutcome::NotFound { codigo_estatus } if codigo_estatus.starts_with("N - 601"))
    );
    q.uuid = "00000000-0000-4000-8000-000000000000".into();
    assert!(
        matches!(client.sat_status(&q).await, StatusOutcome::NotFound { codigo_estatus } if codigo_estatus.starts_with("N - 602"))
    );
    sim.set_faults("status_unavailable=1").await;
    assert!(matches!(
        client.sat_status(&q).await,
        StatusOutcome::Unavailable { .. }
    ));
}

/// A failover from a sandbox started with `faults` to a healthy one, with its route log.
struct FailoverRig {
    primary: Sim,
    backup: Sim,
    f: Failover,
    log: MemoryLog,
}

impl FailoverRig {
    async fn start(faults: &str) -> FailoverRig {
        let (primary, backup) = (Sim::start(faults).await, Sim::start("").await);
        let f = Failover::new(client_for(primary.url(), 2), client_for(backup.url(), 2));
        FailoverRig {
            primary,
            backup,
            f,
            log: MemoryLog::default(),
        }
    }

    /// Stamps through the failover and checks where the call went.
    async fn stamp(&self, xml: &[u8], k: &StampKey, to: Route) -> StampOutcome {
        let (route, outcome) = self.f.stamp_logged(xml, k, &self.log).await;
        assert_eq!(route, to, "{outcome:?}");
        outcome
    }
}

#[tokio::test]
async fn failover_goes_to_the_backup_only_when_the_primary_definitely_did_not_stamp() {
    let rig = FailoverRig::start("status503=1").await;
    let (xml, k) = (sealed(), key());
    let stamp = expect_stamped(rig.stamp(&xml, &k, Route::Backup).await);
    // The primary is back, but the document stays with the backup: same stamp, no new one.
    rig.primary.set_faults("").await;
    let outcome = rig.stamp(&xml, &k, Route::Backup).await;
    assert_eq!(outcome.stamp().map(|s| s.uuid.clone()), Some(stamp.uuid));
    assert!(rig.primary.stamps().await.is_empty());
    assert_eq!(rig.backup.stamps().await.len(), 1);
}

#[tokio::test]
async fn failover_never_follows_an_unknown_until_recover_resolves_it() {
    use autofactura::pac::AttemptLog;
    let rig = FailoverRig::start("lose_response=1").await;

    // The primary stamps and loses the answer: recover at the primary resolves it there.
    let (xml, k) = (sealed(), key());
    let outcome = rig.stamp(&xml, &k, Route::Primary).await;
    assert!(
        matches!(
            &outcome,
            StampOutcome::AlreadyStamped {
                same_content: true,
                ..
            }
        ),
        "{outcome:?}"
    );
    assert_eq!(
        outcome.stamp().map(|s| s.uuid.as_str()),
        rig.primary.stamps().await[0]["uuid"].as_str()
    );

    // A send to the primary whose answer was lost (say, in a crash): while the primary
    // refuses, the document may be stamped there, so the backup is not asked.
    let (xml, k) = (sealed(), key());
    rig.log.before_send(&k, Route::Primary).await.unwrap();
    rig.primary.set_faults("status503=1").await;
    for _ in 0..2 {
        let outcome = rig.stamp(&xml, &k, Route::Primary).await;
        assert_eq!(failure_of(&outcome).0, "unknown");
    }
    assert!(rig.backup.stamps().await.is_empty());

    // Once the primary answers, the same bytes and key resolve there.
    rig.primary.set_faults("").await;
    let outcome = rig.stamp(&xml, &k, Route::Primary).await;
    assert!(outcome.stamp().is_some(), "{outcome:?}");
    assert_eq!(rig.primary.stamps().await.len(), 2);
    assert!(rig.backup.stamps().await.is_empty());
}

#[tokio::test]
async fn failover_goes_to_the_backup_once_recover_at_the_primary_finds_nothing() {
    let rig = FailoverRig::start("reset=1").await;
    let (xml, k) = (sealed(), key());

    // The connection drops after sending: unknown, and the backup is not asked.
    let outcome = rig.stamp(&xml, &k, Route::Primary).await;
    assert_eq!(failure_of(&outcome).0, "unknown");
    assert!(rig.backup.stamps().await.is_empty());
    assert!(
        rig.primary.stamps().await.is_empty(),
        "the reset came before processing"
    );

    // Now the primary answers, but refuses these bytes (their Fecha is past its 72-hour window):
    // it holds no stamp of them, so recover says not found and the backup stamps them.
    rig.primary.set_faults("").await;
    rig.primary.advance_seconds(73 * 3600).await;
    let outcome = rig.stamp(&xml, &k, Route::Backup).await;
    assert!(matches!(outcome, StampOutcome::Stamped(_)), "{outcome:?}");
    assert!(rig.primary.stamps().await.is_empty());
    assert_eq!(rig.backup.stamps().await.len(), 1);
    assert_eq!(
        outcome.stamp().map(|s| s.uuid.as_str()),
        rig.backup.stamps().await[0]["uuid"].as_str()
    );
}

// ---- Finkok, against SOAP fixtures served by a local server ----

mod finkok {
    use super::*;
    use actix_web::{App, HttpResponse, HttpServer, web};

    /// Answers each SOAP operation from a queue of fixture bodies; records the calls.
    #[derive(Default)]
    pub struct Fake {
        queues: Mutex<HashMap<String, VecDeque<String>>>,
        pub calls: Mutex<Vec<String>>,
    }

    impl Fake {
        fn push(&self, op: &str, body: String) {
            self.queues
                .lock()
                .unwrap()
                .entry(op.to_owned())
                .or_default()
                .push_back(body);
        }
    }

    fn op_of(body: &str) -> String {
        let start = body.find("<f:").map(|i| i + 3).unwrap_or(0);
        body[start..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    }

    async fn answer(fake: web::Data<Arc<Fake>>, body: String) -> HttpResponse {
        let op = op_of(&body);
        fake.calls.lock().unwrap().push(op.clone());
        let mut queues = fake.queues.lock().unwrap();
        let q = queues.entry(op.clone()).or_default();
        let next = if q.len() > 1 {
            q.pop_front()
        } else {
            q.front().cloned()
        };
        match next {
            Some(b) if b.contains("<senv:Fault>") => HttpResponse::InternalServerError()
                .content_type("text/xml")
                .body(b),
            Some(b) => HttpResponse::Ok().content_type("text/xml").body(b),
            None => HttpResponse::NotFound().body(format!("no fixture for {op}")),
        }
    }

    fn serve(fake: Arc<Fake>) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let data = web::Data::new(fake);
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .default_service(web::post().to(answer))
        })
        .workers(1)
        .disable_signals()
        .listen(listener)
        .unwrap()
        .run();
        tokio::spawn(server);
        url
    }

    fn fixture(name: &str, stamp: Option<&autofactura::pac::Stamp>) -> String {
        let path = format!("{}/fixtures/pac/finkok/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(path).unwrap();
        match stamp {
            Some(s) => {
                let xml =
                    quick_xml::escape::escape(std::str::from_utf8(&s.xml).unwrap()).into_owned();
                text.replace("{{XML}}", &xml).replace("{{UUID}}", &s.uuid)
            }
            None => text,
        }
    }

    /// A fake Finkok that answers with `answers` (operation, fixture, the stamp the fixture
    /// carries), each operation's in turn, and a client of it that waits `stamped_wait` seconds
    /// for `stamped`.
    pub fn answering(
        answers: &[(&str, &str, Option<&autofactura::pac::Stamp>)],
        stamped_wait: u64,
    ) -> (Arc<Fake>, PacClient) {
        let fake = Arc::new(Fake::default());
        for (op, name, stamp) in answers {
            fake.push(op, fixture(name, *stamp));
        }
        let url = serve(fake.clone());
        (fake, client(&url, stamped_wait))
    }

    fn client(url: &str, stamped_wait: u64) -> PacClient {
        let cfg = PacConfig {
            kind: PacKind::Finkok,
            url: Some(url.to_owned()),
            user: Some("demo@example.com".into()),
            password: Some("secret".into()),
            stamped_wait,
            request_timeout: 5,
            ..PacConfig::default()
        };
        super::finkok_with_csd(&cfg)
    }

    /// A real stamped CFDI (from the sandbox logic) to put inside fixtures.
    pub fn stamped(xml: &[u8]) -> autofactura::pac::Stamp {
        let dir = tempfile::tempdir().unwrap();
        let sim = autofactura::pacsim::Sim::open(&dir.path().join("s.jsonl"), FaultSpec::default())
            .unwrap();
        match sim.stamp(xml, None).unwrap() {
            autofactura::pacsim::StampAnswer::Stamped(r) => {
                autofactura::pac::Stamp::from_xml(r.xml.into_bytes()).unwrap()
            }
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn finkok_stamp_outcomes_from_its_soap_answers() {
    let xml = sealed();
    let stamp = finkok::stamped(&xml);
    let s = Some(&stamp);
    let already = StampOutcome::AlreadyStamped {
        stamp: stamp.clone(),
        same_content: true,
    };

    let (_, c) = finkok::answering(&[("stamp", "stamp-ok.xml", s)], 5);
    assert_eq!(
        c.stamp(&xml, &key()).await,
        StampOutcome::Stamped(stamp.clone())
    );
    let (_, c) = finkok::answering(&[("stamp", "stamp-307-with-xml.xml", s)], 5);
    assert_eq!(c.stamp(&xml, &key()).await, already);

    // 307 with an empty body; `stamped` lags with 603 twice, then answers.
    let empty_307 = ("stamp", "stamp-307-empty.xml", None);
    let lags = ("stamped", "stamped-603.xml", None);
    let answers = [empty_307, lags, lags, ("stamped", "stamped-ok.xml", s)];
    let (fake, c) = finkok::answering(&answers, 10);
    assert_eq!(c.stamp(&xml, &key()).await, already);
    assert_eq!(
        fake.calls.lock().unwrap().as_slice(),
        ["stamp", "stamped", "stamped", "stamped"]
    );

    // 307 and `stamped` never catches up within the wait: stamped for sure, XML unknown.
    let (_, c) = finkok::answering(&[empty_307, lags], 1);
    assert_eq!(failure_of(&c.stamp(&xml, &key()).await).0, "unknown");

    let (_, c) = finkok::answering(&[("stamp", "stamp-rejected.xml", None), lags], 1);
    assert_eq!(
        c.stamp(&xml, &key()).await,
        StampOutcome::Rejected {
            code: "302".into(),
            message: "Sello mal formado o inválido".into(),
        }
    );
    assert_eq!(c.recover_by_key(&xml, &key()).await, Recovery::NotFound);

    let (_, c) = finkok::answering(&[("stamp", "soap-fault.xml", None)], 1);
    assert_eq!(failure_of(&c.stamp(&xml, &key()).await).0, "unknown");
}

#[tokio::test]
async fn finkok_cancel_and_status_from_its_soap_answers() {
    let stamp = finkok::stamped(&sealed());
    let s = Some(&stamp);
    let (_, c) = finkok::answering(
        &[
            ("cancel", "cancel-201.xml", s),
            ("cancel", "cancel-205.xml", s),
            ("cancel", "cancel-708.xml", None),
            ("get_sat_status", "get-sat-status.xml", None),
            ("get_sat_status", "get-sat-status-601.xml", None),
        ],
        1,
    );
    let req = cancel_req(&stamp.uuid, Motivo::SinRelacion);
    let (code, acuse, estatus) = requested(c.cancel(&req).await);
    assert_eq!(code, "201");
    assert!(acuse.starts_with("<Acuse"), "{acuse}");
    assert_eq!(estatus.as_deref(), Some("En proceso"));
    assert!(matches!(c.cancel(&req).await, CancelOutcome::Rejected { code, .. } if code == "205"));
    assert!(matches!(
        c.cancel(&req).await,
        CancelOutcome::Retryable { .. }
    ));

    let q = StatusQuery::from_stamped_xml(&stamp.xml).unwrap();
    match c.sat_status(&q).await {
        StatusOutcome::Found(s) => {
            assert_eq!(s.estado, "Vigente");
            assert_eq!(s.estatus_cancelacion, "En proceso");
        }
        other => panic!("expected Found, got {other:?}"),
    }
    // N - 601 next to Estado Vigente: CodigoEstatus wins.
    assert!(
        matches!(c.sat_status(&q).await, StatusOutcome::NotFound { codigo_estatus } if codigo_estatus.starts_with("N - 601"))
    );
}

// ---- Finkok, against the sandbox's Finkok SOAP shape over real HTTP ----

/// The Finkok adapter pointed at the sandbox (its credentials, its CSD for `cancel`).
fn finkok_at(sim: &Sim, stamped_wait: u64, timeout: u64) -> PacClient {
    let cfg = PacConfig {
        kind: PacKind::Finkok,
        url: Some(sim.url().to_owned()),
        user: Some("sandbox".into()),
        password: Some("sandbox".into()),
        stamped_wait,
        request_timeout: timeout,
        connect_timeout: 2,
        ..PacConfig::default()
    };
    finkok_with_csd(&cfg)
}

/// The Finkok adapter for `cfg`, with a placeholder CSD for `cancel` (what the PAC checks is
/// its own business: these PACs are stand-ins).
fn finkok_with_csd(cfg: &PacConfig) -> PacClient {
    let c = autofactura::pac::finkok::FinkokClient::new(cfg)
        .unwrap()
        .with_cancel_csd(autofactura::pac::finkok::CancelCsd {
            cer_pem_b64: "Y2Vy".into(),
            key_pem_b64: "a2V5".into(),
        });
    PacClient::Finkok(c)
}

#[tokio::test]
async fn finkok_sandbox_stamps_and_answers_a_repeat_with_307_and_the_original() {
    let sim = Sim::start("").await;
    let finkok = finkok_at(&sim, 5, 5);
    let xml = sealed();
    let first = expect_stamped(finkok.stamp(&xml, &key()).await);
    assert!(first.belongs_to(&xml));
    let certs = autofactura::cli::known_tfd_certificates();
    let report = cfdi::verify::verify(
        &first.xml,
        &cfdi::verify::VerifyOptions { tfd_certs: &certs },
    );
    assert!(report.is_valid(), "{:?}", report.problems);

    // 307 with the previous xml: recovered without a lookup.
    expect_same_stamp(finkok.stamp(&xml, &key()).await, &first);
    // One journal for both shapes: the SW shape sees the Finkok stamp as its 307.
    match sim.client().stamp(&xml, &key()).await {
        StampOutcome::AlreadyStamped { stamp, .. } => assert_eq!(stamp.uuid, first.uuid),
        other => panic!("expected AlreadyStamped, got {other:?}"),
    }
    let stamps = sim.stamps().await;
    assert_eq!(stamps.len(), 1);
    assert_eq!(stamps[0]["uuid"], first.uuid.as_str());
    assert!(stamps[0]["customid"].is_null(), "Finkok sends no key");

    // Wrong credentials stamp nothing.
    let cfg = PacConfig {
        kind: PacKind::Finkok,
        url: Some(sim.url().to_owned()),
        user: Some("sandbox".into()),
        password: Some("wrong".into()),
        request_timeout: 5,
        ..PacConfig::default()
    };
    let bad = PacClient::from_config(&cfg).unwrap();
    assert!(bad.stamp(&sealed(), &key()).await.stamp().is_none());
    assert_eq!(sim.stamps().await.len(), 1);
}

#[tokio::test]
async fn finkok_sandbox_307_with_an_empty_body_is_recovered_through_the_stamped_lag() {
    // A lag of a minute on the sandbox's clock, which is then moved to 2 s before its end: the
    // second call comes within the lag however slow the machine, the third polls through it.
    let sim = Sim::start("empty_307=1,stamped_lag=60s").await;
    let xml = sealed();
    let first = expect_stamped(finkok_at(&sim, 10, 5).stamp(&xml, &key()).await);

    // Right after the stamp `stamped` still answers 603: a client that gives up at once knows
    // the document is stamped but not its XML, so the outcome stays open.
    match finkok_at(&sim, 0, 5).stamp(&xml, &key()).await {
        StampOutcome::Unknown { reason, .. } => assert!(reason.contains("603"), "{reason}"),
        other => panic!("expected Unknown while `stamped` lags, got {other:?}"),
    }
    // Polling `stamped` with backoff through the lag finds the original.
    sim.advance_seconds(58).await;
    expect_same_stamp(finkok_at(&sim, 10, 5).stamp(&xml, &key()).await, &first);
    assert_eq!(sim.stamps().await.len(), 1);
}

#[tokio::test]
async fn finkok_sandbox_rejections_carry_the_codes_as_incidencias() {
    let sim = Sim::start("").await;
    let finkok = finkok_at(&sim, 1, 5);
    let xml = sealed();
    let text = String::from_utf8(xml.clone()).unwrap();
    let total = Element::parse(&xml)
        .unwrap()
        .attr("Total")
        .unwrap()
        .to_owned();
    let tampered = text.replacen(&format!("Total=\"{total}\""), "Total=\"1.00\"", 1);
    let code = |o: StampOutcome| match o {
        StampOutcome::Rejected { code, message, .. } => {
            assert!(!message.is_empty());
            code
        }
        other => panic!("expected Rejected, got {other:?}"),
    };
    assert_eq!(
        code(finkok.stamp(tampered.as_bytes(), &key()).await),
        "CFDI40102"
    );
    assert_eq!(
        code(
            finkok
                .stamp(&edit_and_reseal(&xml, "Total", "579.84"), &key())
                .await
        ),
        "CFDI40119"
    );
    let old = seal(&InvoiceRequest {
        fecha: now_in_mexico() - ChronoDuration::hours(73),
        ..request()
    });
    assert_eq!(code(finkok.stamp(&old, &key()).await), "401");
    assert_eq!(code(finkok.stamp(b"<not-xml", &key()).await), "301");
    // A rejected document was never stamped: the lookup by content says so.
    assert_eq!(
        finkok.recover_by_key(&old, &key()).await,
        Recovery::NotFound
    );
    assert!(sim.stamps().await.is_empty());
}

#[tokio::test]
async fn finkok_sandbox_lost_response_is_unknown_then_recovered_by_content() {
    for spec in [
        "lose_response=1",
        "malformed=1",
        "lose_response=1:mode=hang:hang=5s",
    ] {
        let sim = Sim::start(&format!("{spec},stamped_lag=2s")).await;
        let finkok = finkok_at(&sim, 10, 2);
        let uuid = lost_then_recovered(&sim, &finkok, "stamped_lag=2s", true).await;
        // And by UUID (`get_xml`), for the emisor only.
        assert!(matches!(
            finkok.recover_by_uuid(&uuid, "EKU9003173C9").await,
            Recovery::Found(s) if s.uuid == uuid
        ));
        assert_eq!(
            finkok.recover_by_uuid(&uuid, "XIQB891116QE4").await,
            Recovery::NotFound
        );
        assert_eq!(
            sim.stamps().await.len(),
            1,
            "{spec}: nor does asking by UUID"
        );
    }
}

#[tokio::test]
async fn finkok_sandbox_refusals_before_processing_are_retryable() {
    let sim = Sim::start("").await;
    let finkok = finkok_at(&sim, 1, 5);
    for (faults, want) in [
        ("status503=1", ("retryable", Some(503))),
        ("status500=1", ("unknown", Some(500))),
    ] {
        assert_eq!(failure_under(&sim, &finkok, faults).await, want, "{faults}");
    }
    assert!(sim.stamps().await.is_empty());
}

#[tokio::test]
async fn finkok_sandbox_cancels_and_answers_the_sat_status() {
    let sim = Sim::start("").await;
    let finkok = finkok_at(&sim, 1, 5);
    let stamp = expect_stamped(finkok.stamp(&sealed(), &key()).await);
    let q = StatusQuery::from_stamped_xml(&stamp.xml).unwrap();
    match finkok.sat_status(&q).await {
        StatusOutcome::Found(s) => assert_eq!(
            (s.estado.as_str(), s.es_cancelable.as_str()),
            ("Vigente", "Cancelable sin aceptación")
        ),
        other => panic!("expected Found, got {other:?}"),
    }
    let mut wrong_total = q.clone();
    wrong_total.total = "1.00".into();
    assert!(
        matches!(finkok.sat_status(&wrong_total).await, StatusOutcome::NotFound { codigo_estatus } if codigo_estatus.starts_with("N - 601"))
    );

    let req = cancel_req(&stamp.uuid, Motivo::SinRelacion);
    let (code, acuse, estatus) = requested(finkok.cancel(&req).await);
    assert_eq!(code, "201");
    assert!(acuse.contains("<EstatusUUID>201</EstatusUUID>"), "{acuse}");
    assert_eq!(estatus.as_deref(), Some("Cancelado sin aceptación"));
    assert!(
        matches!(finkok.cancel(&req).await, CancelOutcome::Requested { code, .. } if code == "202")
    );
    match finkok.sat_status(&q).await {
        StatusOutcome::Found(s) => assert_eq!(s.estado, "Cancelado"),
        other => panic!("expected Found, got {other:?}"),
    }
    let unknown = cancel_req("00000000-0000-4000-8000-000000000000", Motivo::SinRelacion);
    assert!(
        matches!(finkok.cancel(&unknown).await, CancelOutcome::Rejected { code, .. } if code == "205")
    );
    let no_folio = cancel_req(&stamp.uuid, Motivo::ConRelacion);
    assert!(
        matches!(finkok.cancel(&no_folio).await, CancelOutcome::Rejected { code, .. } if code == "301")
    );
    sim.set_faults("status_unavailable=1").await;
    assert!(matches!(
        finkok.sat_status(&q).await,
        StatusOutcome::Unavailable { .. }
    ));
}

// ---- The sandbox's schema-level checks (XSD facets and catalogs) ----

/// Replaces the first `from` with `to` anywhere in the document and re-seals, so only the edit
/// is wrong.
fn replace_and_reseal(xml: &[u8], from: &str, to: &str) -> Vec<u8> {
    let text = String::from_utf8(xml.to_vec()).unwrap();
    assert!(text.contains(from), "`{from}` is not in the document");
    let text = text.replacen(from, to, 1);
    let root = Element::parse(text.as_bytes()).unwrap();
    let sello = sandbox_csd()
        .unwrap()
        .sign(&cadena_comprobante(&root).unwrap())
        .unwrap();
    text.replacen(
        &format!(" Sello=\"{}\"", root.attr("Sello").unwrap()),
        &format!(" Sello=\"{sello}\""),
        1,
    )
    .into_bytes()
}

/// Stamps over SW's wire shape by hand, to read `messageDetail` (the adapter keeps the message).
async fn raw_sw_stamp(sim: &Sim, xml: &[u8]) -> Value {
    let http = reqwest::Client::new();
    let auth: Value = http
        .post(format!("{}/security/authenticate", sim.url()))
        .header("user", "sandbox")
        .header("password", "sandbox")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = auth["data"]["token"].as_str().unwrap().to_owned();
    let form = reqwest::multipart::Form::new().part(
        "xml",
        reqwest::multipart::Part::bytes(xml.to_vec()).file_name("xml"),
    );
    http.post(format!("{}/v4/cfdi33/stamp/v4", sim.url()))
        .bearer_auth(token)
        .header("customid", key().as_str())
        .multipart(form)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Documents that break one XSD facet or catalog each (and nothing else: re-sealed), with the
/// attribute the sandbox must name.
fn schema_violations(xml: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    let root = Element::parse(xml).unwrap();
    let fecha = root.attr("Fecha").unwrap().to_owned();
    let bad_fecha = fecha.replacen('T', " ", 1);
    let no_cert = root.attr("NoCertificado").unwrap().to_owned();
    // One attribute from `old` to `new`; the label names it after its `@`.
    let edit = |at: &'static str, old: &str, new: &str| {
        let name = at.rsplit('@').next().unwrap();
        let (from, to) = (format!("{name}=\"{old}\""), format!("{name}=\"{new}\""));
        (at, replace_and_reseal(xml, &from, &to))
    };
    vec![
        edit("Receptor@Rfc", "XIQB891116QE4", "XIQB891316QE4"),
        edit("Comprobante@FormaPago", "04", "77"),
        edit("Receptor@UsoCFDI", "G03", "Z99"),
        edit("Comprobante@Fecha", &fecha, &bad_fecha),
        edit("Comprobante@NoCertificado", &no_cert, &no_cert[1..]),
        edit("Comprobante@SubTotal", "499.00", "499.0000000"),
        edit("Concepto[1]@ClaveUnidad", "E48", "ZZ9"),
        edit("Concepto[1]@ClaveProdServ", "43231500", "99999999"),
        edit("Comprobante@MetodoPago", "PUE", "PUD"),
        edit("Emisor@RegimenFiscal", "601", "6O1"),
        edit("Concepto[1]@ObjetoImp", "02", "09"),
        // The Impuestos summary's Traslado, not the concepto's.
        (
            "Impuestos/Traslado@TipoFactor",
            replace_and_reseal(
                xml,
                "<cfdi:Traslados>\n      <cfdi:Traslado Base=\"499.00\" Impuesto=\"002\" TipoFactor=\"Tasa\"",
                "<cfdi:Traslados>\n      <cfdi:Traslado Base=\"499.00\" Impuesto=\"002\" TipoFactor=\"tasa\"",
            ),
        ),
    ]
}

#[tokio::test]
async fn documents_the_xsd_refuses_are_rejected_with_301_naming_the_attribute() {
    let sim = Sim::start("").await;
    let xml = sealed();
    for (attr, doc) in schema_violations(&xml) {
        let answer = raw_sw_stamp(&sim, &doc).await;
        assert_eq!(answer["status"], "error", "{attr}: {answer}");
        assert_eq!(
            answer["message"], "301 - XML mal formado",
            "{attr}: {answer}"
        );
        let detail = answer["messageDetail"].as_str().unwrap();
        assert!(detail.contains(attr), "{attr}: {detail}");
        // The adapters read the same code, in both wire shapes.
        assert!(
            matches!(sim.client().stamp(&doc, &key()).await, StampOutcome::Rejected { code, .. } if code == "301"),
            "{attr}"
        );
        assert!(
            matches!(finkok_at(&sim, 0, 5).stamp(&doc, &key()).await, StampOutcome::Rejected { code, .. } if code == "301"),
            "{attr}"
        );
    }
    // A régimen the XSD still lists but the CFDI 4.0 catalog retired.
    let retired = replace_and_reseal(&xml, "RegimenFiscal=\"601\"", "RegimenFiscal=\"609\"");
    let answer = raw_sw_stamp(&sim, &retired).await;
    assert_eq!(answer["message"], "301 - XML mal formado", "{answer}");
    assert!(sim.stamps().await.is_empty());
    // The untouched document passes.
    expect_stamped(sim.client().stamp(&xml, &key()).await);
}

#[tokio::test]
async fn every_sample_the_engine_produces_passes_the_sandbox_checks() {
    let sim = Sim::start("").await;
    for (name, json) in SAMPLE_REQUESTS {
        let mut req: InvoiceRequest = serde_json::from_str(json).unwrap();
        req.folio = Some(format!("S{}-{name}", std::process::id()));
        // Local time at the sample's LugarExpedicion, as the sandbox reads Fecha.
        req.fecha = autofactura::domain::time::now_at(&req.emisor.lugar_expedicion)
            - ChronoDuration::minutes(1);
        let xml = seal(&req);
        match sim.client().stamp(&xml, &key()).await {
            StampOutcome::Stamped(s) => assert!(s.belongs_to(&xml), "{name}"),
            other => panic!("sample {name}: expected Stamped, got {other:?}"),
        }
    }
    assert_eq!(sim.stamps().await.len(), SAMPLE_REQUESTS.len());
}

/// The XSD itself (xmllint, installed by scripts/test) refuses every document of
/// `schema_violations` and accepts the untouched one and the edge cases the checker accepts: on
/// these, the checker and the XSD agree both ways.
#[test]
fn the_xsd_refuses_what_the_sandbox_refuses() {
    let schema = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/sat/schemas/www.sat.gob.mx/sitio_internet/cfd/4/cfdv40.xsd");
    let dir = tempfile::tempdir().unwrap();
    let xml = sealed();
    let good = dir.path().join("good.xml");
    std::fs::write(&good, &xml).unwrap();
    let mut files = vec![("good", good)];
    // Unusual but valid: trailing zeros beyond 6 decimals in an xs:decimal (the facet counts the
    // value's digits), spaces the XSD collapses. The sandbox's checker accepts them too.
    let edges = [
        replace_and_reseal(&xml, "Cantidad=\"1\"", "Cantidad=\"1.0000000\""),
        replace_and_reseal(&xml, "Rfc=\"XIQB891116QE4\"", "Rfc=\" XIQB891116QE4 \""),
        replace_and_reseal(&xml, "TasaOCuota=\"0.160000\"", "TasaOCuota=\"0.16000000\""),
    ];
    for (i, doc) in edges.into_iter().enumerate() {
        let root = Element::parse(&doc).unwrap();
        let problems = autofactura::pacsim::schema::check(&root);
        assert!(problems.is_empty(), "edge {i}: {problems:?}");
        let path = dir.path().join(format!("edge-{i}.xml"));
        std::fs::write(&path, doc).unwrap();
        files.push(("good", path));
    }
    for (i, (attr, doc)) in schema_violations(&xml).into_iter().enumerate() {
        let root = Element::parse(&doc).unwrap();
        assert!(
            !autofactura::pacsim::schema::check(&root).is_empty(),
            "{attr}"
        );
        let path = dir.path().join(format!("bad-{i}.xml"));
        std::fs::write(&path, doc).unwrap();
        files.push((attr, path));
    }
    let out = std::process::Command::new("xmllint")
        .args(["--nonet", "--noout", "--schema"])
        .arg(&schema)
        .args(files.iter().map(|(_, p)| p))
        .output()
        .unwrap_or_else(|e| panic!("cannot run xmllint: {e} (scripts/test installs it)"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for (attr, path) in &files {
        let p = path.display();
        if *attr == "good" {
            assert!(stderr.contains(&format!("{p} validates")), "{stderr}");
        } else {
            assert!(
                stderr.contains(&format!("{p} fails to validate")),
                "{attr}: {stderr}"
            );
        }
    }
}

// ---- SW recover by key: no lookup by customid, so the same bytes and key go again ----

#[tokio::test]
async fn sw_recover_by_key_resends_the_same_bytes_and_key() {
    let sim = Sim::start("").await;
    let client = sim.client();

    // Stamped before: the resend answers 307 with the original, and nothing new is stamped.
    let (xml, k) = (sealed(), key());
    let first = expect_stamped(client.stamp(&xml, &k).await);
    expect_same_stamp(client.stamp(&xml, &k).await, &first);
    assert_eq!(
        client.recover_by_key(&xml, &k).await,
        Recovery::Found(first.clone())
    );
    assert_eq!(sim.stamps().await.len(), 1);

    // The key reused for other content (CFDI3307): found, but a stamp of other bytes.
    let other = sealed();
    match client.recover_by_key(&other, &k).await {
        Recovery::Found(s) => {
            assert_eq!(s.uuid, first.uuid);
            assert!(!s.belongs_to(&other));
        }
        r => panic!("expected Found, got {r:?}"),
    }
    assert_eq!(sim.stamps().await.len(), 1);

    // Never stamped, and the PAC refuses these very bytes (Fecha past the 72-hour window): it
    // holds no stamp of them.
    let (late, late_key) = (sealed(), key());
    sim.advance_seconds(73 * 3600).await;
    assert_eq!(
        client.recover_by_key(&late, &late_key).await,
        Recovery::NotFound
    );
    assert_eq!(sim.stamps().await.len(), 1);

    // Never stamped but valid: the resend stamps them now; one CFDI, under this key.
    let fresh = seal(&InvoiceRequest {
        fecha: now_in_mexico() + ChronoDuration::hours(73) - ChronoDuration::minutes(1),
        ..request()
    });
    let fresh_key = key();
    match client.recover_by_key(&fresh, &fresh_key).await {
        Recovery::Found(s) => assert!(s.belongs_to(&fresh)),
        r => panic!("expected Found, got {r:?}"),
    }
    let stamps = sim.stamps().await;
    assert_eq!(stamps.len(), 2);
    assert_eq!(stamps[1]["customid"], fresh_key.as_str());
}

/// `quick_stamp` answers a repeat with `307` and never the previous stamp (raw SOAP: the adapter
/// uses `stamp`).
#[tokio::test]
async fn finkok_sandbox_quick_stamp_never_returns_the_previous_stamp() {
    use base64::Engine;
    let sim = Sim::start("").await;
    let xml = sealed();
    let first = expect_stamped(finkok_at(&sim, 1, 5).stamp(&xml, &key()).await);
    let envelope = format!(
        concat!(
            r#"<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" xmlns:f="http://facturacion.finkok.com/stamp">"#,
            r#"<soapenv:Body><f:quick_stamp><f:xml>{}</f:xml><f:username>sandbox</f:username><f:password>sandbox</f:password></f:quick_stamp></soapenv:Body></soapenv:Envelope>"#
        ),
        base64::engine::general_purpose::STANDARD.encode(&xml)
    );
    let body = reqwest::Client::new()
        .post(format!("{}/servicios/soap/stamp", sim.url()))
        .header("Content-Type", "text/xml; charset=utf-8")
        .body(envelope)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let root = Element::parse(body.as_bytes()).unwrap();
    let result = root.path("http://schemas.xmlsoap.org/soap/envelope/", &["Body"]);
    let text = result[0].text_content();
    assert!(body.contains("quick_stampResult"), "{body}");
    assert!(
        body.contains("<s0:CodigoError>307</s0:CodigoError>"),
        "{body}"
    );
    assert!(!text.contains(&first.uuid), "{body}");
    assert_eq!(sim.stamps().await.len(), 1);
}

#[tokio::test]
async fn a_pago_with_broken_saldo_arithmetic_is_rejected_with_its_crp_code() {
    let sim = Sim::start("").await;
    let (_, json) = SAMPLE_REQUESTS
        .iter()
        .find(|(n, _)| *n == "13-pago-parcialidad-1")
        .expect("pago sample");
    let mut req: InvoiceRequest = serde_json::from_str(json).unwrap();
    req.folio = Some(format!("P{}", std::process::id()));
    req.fecha = now_in_mexico() - ChronoDuration::minutes(1);
    let xml = seal(&req);
    let broken = replace_and_reseal(
        &xml,
        "ImpSaldoInsoluto=\"660.00\"",
        "ImpSaldoInsoluto=\"600.00\"",
    );
    let (code, message) = rejected(&sim, &broken).await;
    assert_eq!(code, "CRP224", "{message}");
    assert!(sim.stamps().await.is_empty());
    assert!(matches!(
        sim.client().stamp(&xml, &key()).await,
        StampOutcome::Stamped(_)
    ));
}
