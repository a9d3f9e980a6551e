//! Argentina (issue 21): the WSAA login over real HTTP against the sandbox ARCA. The ticket is
//! stored in the database, shared by instances, reused after a restart, renewed once it nears
//! its expiry, never logged in for twice at once; the sandbox refuses logins with WSAA's
//! fault codes.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use autofactura::arca::wsaa::{
    SERVICE, Wsaa, WsaaError, login_envelope, login_ticket_request, parse_login_response, sign_tra,
};
use autofactura::arca::{Auth, CbteTipo, Environment, Wsfe};
use autofactura::arcasim::ArcaSim;
use autofactura::arcasim::server::{ArcaSimHandle, start};
use autofactura::store::Db;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use support::{Backend, spawn_app};

const CUIT: i64 = 20_111_111_112;
const TIMEOUT: Duration = Duration::from_secs(10);

fn credentials() -> (Vec<u8>, Vec<u8>) {
    (
        include_bytes!("../../fixtures/arca/test.crt").to_vec(),
        include_bytes!("../../fixtures/arca/test.key").to_vec(),
    )
}

fn sandbox(dir: &tempfile::TempDir, faults: &str) -> ArcaSimHandle {
    let sim = ArcaSim::open(&dir.path().join("arcasim.json")).expect("sim");
    sim.set_faults(faults).expect("faults");
    start(Arc::new(sim), "127.0.0.1:0").expect("start the sandbox ARCA")
}

fn wsaa(db: &Db, sim: &ArcaSimHandle, renew_before: chrono::Duration) -> Wsaa {
    Wsaa::new(
        db.clone(),
        &sim.wsaa_url(),
        Environment::Homologacion,
        credentials(),
        renew_before,
        TIMEOUT,
    )
    .expect("wsaa")
}

/// `FECompUltimoAutorizado` of Factura C at point 1, with the ticket `token`/`sign`.
async fn last_with(
    sim: &ArcaSimHandle,
    token: &str,
    sign: &str,
) -> Result<i64, autofactura::arca::WsfeError> {
    let auth = Auth {
        token: token.to_owned(),
        sign: sign.to_owned(),
        cuit: CUIT,
    };
    let w = Wsfe::new(&sim.wsfe_url(), auth, TIMEOUT).expect("wsfe");
    w.last_authorized(1, CbteTipo::FacturaC).await
}

fn logins(sim: &ArcaSimHandle) -> u64 {
    sim.sim().logins.load(std::sync::atomic::Ordering::SeqCst)
}

async fn a_ticket_is_logged_in_once_stored_and_reused_after_a_restart(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sandbox(&dir, "strict_auth=true");
    let renew = chrono::Duration::minutes(10);
    // Two instances on one database, four callers each, all at once: one login.
    let (one, two) = (wsaa(&app.db, &sim, renew), wsaa(&app.db, &sim, renew));
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..8 {
        let w = if i % 2 == 0 { one.clone() } else { two.clone() };
        calls.spawn(async move { w.ticket().await });
    }
    let mut tokens = std::collections::BTreeSet::new();
    while let Some(t) = calls.join_next().await {
        tokens.insert(t.expect("join").expect("ticket").token);
    }
    assert_eq!(tokens.len(), 1, "one ticket for every caller");
    assert_eq!(logins(&sim), 1, "one login");

    // A restart: the stored ticket is used, no login.
    let restarted = wsaa(&app.db, &sim, renew);
    let t = restarted.ticket().await.expect("stored ticket");
    assert!(tokens.contains(&t.token));
    assert_eq!(
        logins(&sim),
        1,
        "the stored ticket is reused after a restart"
    );
    // And WSFEv1 takes it (the sandbox asks for a ticket it handed out).
    assert_eq!(last_with(&sim, &t.token, &t.sign).await.expect("last"), 0);
    assert!(last_with(&sim, "forged", &t.sign).await.is_err());
    sim.stop().await;
}

async fn a_ticket_near_its_expiry_is_renewed_and_a_refused_renewal_keeps_it(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    // Tickets of 3 s, renewed 1 min ahead: every stored ticket is due for renewal.
    let sim = sandbox(&dir, "ticket_seconds=3");
    let w = wsaa(&app.db, &sim, chrono::Duration::minutes(1));
    let first = w.ticket().await.expect("ticket");
    // Renewal refused (coe.alreadyAuthenticated while it is valid): the stored one serves,
    // unless it expired meanwhile on a slow machine (then a new login is right too).
    let again = w.ticket().await.expect("ticket");
    assert!(again.token == first.token || again.expires_at > first.expires_at);
    // Once it has expired, the next call logs in again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let t = w.ticket().await.expect("ticket");
        if t.token != first.token {
            assert!(t.expires_at > first.expires_at);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never renewed");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(logins(&sim) >= 2);
    let stored = app
        .db
        .arca_ticket(
            "homologacion",
            SERVICE,
            &hex::encode(
                openssl::x509::X509::from_pem(&credentials().0)
                    .expect("cert")
                    .digest(openssl::hash::MessageDigest::sha256())
                    .expect("digest"),
            ),
        )
        .await
        .expect("read")
        .expect("stored");
    assert_ne!(stored.token, first.token, "the renewed ticket is stored");
    sim.stop().await;
}

fn fingerprint() -> String {
    let cert = openssl::x509::X509::from_pem(&credentials().0).expect("cert");
    let digest = cert
        .digest(openssl::hash::MessageDigest::sha256())
        .expect("digest");
    hex::encode(digest)
}

async fn a_login_whose_answer_is_lost_does_not_lock_the_appliance_out(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sandbox(&dir, "strict_auth=true");
    let s = sim.sim();
    let ordering = std::sync::atomic::Ordering::SeqCst;
    // ARCA hands out a 12 h ticket and the answer is lost: as if the process died before
    // storing it. New logins are refused for 10 s after it (ARCA: minutes), long enough for a
    // loaded machine's restarted instance to be refused.
    s.relogin_seconds.store(10, ordering);
    s.lose_logins.store(1, ordering);
    let renew = chrono::Duration::minutes(10);
    let backoff =
        |w: Wsaa| w.with_login_backoff(chrono::Duration::seconds(1), chrono::Duration::seconds(2));
    let lost = backoff(wsaa(&app.db, &sim, renew)).ticket().await;
    assert!(matches!(lost, Err(WsaaError::Transport(_))), "{lost:?}");
    assert_eq!(logins(&sim), 1, "ARCA handed out a ticket");
    let fp = fingerprint();
    let stored = app.db.arca_ticket("homologacion", SERVICE, &fp).await;
    assert_eq!(stored.expect("read"), None, "nothing was stored");

    // A restarted instance: refused while the lost ticket is young, then it backs off (no
    // login tried before the refusal's retry time), then logs in.
    let restarted = backoff(wsaa(&app.db, &sim, renew));
    let refused = restarted.ticket().await;
    assert!(
        matches!(refused, Err(WsaaError::LockedOut { .. })),
        "{refused:?}"
    );
    let refusal = app
        .db
        .arca_login_refusal("homologacion", SERVICE, &fp)
        .await;
    let refusal = refusal.expect("read").expect("the refusal is recorded");
    assert_eq!(refusal.refusals, 1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let ticket = loop {
        let attempts = s.login_attempts.load(ordering);
        match restarted.ticket().await {
            Ok(t) => break t,
            Err(WsaaError::LockedOut { until }) => {
                if until > chrono::Utc::now() + chrono::Duration::milliseconds(500) {
                    // Still backing off: only a refusal just now may have called ARCA.
                    assert!(s.login_attempts.load(ordering) <= attempts + 1);
                }
            }
            Err(e) => panic!("{e}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "locked out");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(logins(&sim), 2, "one new ticket");
    let last = last_with(&sim, &ticket.token, &ticket.sign).await;
    assert_eq!(last.expect("WSFEv1 takes the new ticket"), 0);
    let stored = app.db.arca_ticket("homologacion", SERVICE, &fp).await;
    assert_eq!(stored.expect("read").map(|t| t.token), Some(ticket.token));
    let refusal = app
        .db
        .arca_login_refusal("homologacion", SERVICE, &fp)
        .await;
    assert_eq!(refusal.expect("read"), None, "the refusal is over");
    // Backing off asked ARCA far less often than the 200 ms polling would have.
    assert!(s.login_attempts.load(ordering) < 12, "{s:?}");
    sim.stop().await;
}

crate::on_both_backends!(
    a_ticket_is_logged_in_once_stored_and_reused_after_a_restart,
    a_ticket_near_its_expiry_is_renewed_and_a_refused_renewal_keeps_it,
    a_login_whose_answer_is_lost_does_not_lock_the_appliance_out,
);

/// `loginCms` of `cms` over HTTP: the sandbox's fault code, or `ok`.
async fn login_code(sim: &ArcaSimHandle, cms: &str) -> String {
    let r = reqwest::Client::new()
        .post(sim.wsaa_url())
        .header("soapaction", "\"\"")
        .body(login_envelope(cms))
        .send()
        .await
        .expect("post");
    match parse_login_response(&r.bytes().await.expect("body")) {
        Ok(_) => "ok".into(),
        Err(WsaaError::Fault { code, .. }) => code,
        Err(WsaaError::AlreadyAuthenticated) => "coe.alreadyAuthenticated".into(),
        Err(e) => panic!("not a WSAA answer: {e}"),
    }
}

/// A TRA for `wsfe` valid from `from` to `to`.
fn tra_between(from: chrono::DateTime<chrono::Utc>, to: chrono::DateTime<chrono::Utc>) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><loginTicketRequest version=\"1.0\">\
         <header><uniqueId>1</uniqueId><generationTime>{}</generationTime>\
         <expirationTime>{}</expirationTime></header><service>wsfe</service>\
         </loginTicketRequest>",
        from.to_rfc3339(),
        to.to_rfc3339()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_refuses_logins_with_wsaa_fault_codes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sandbox(&dir, "none");
    let (cert, key) = credentials();
    let now = chrono::Utc::now();
    let signed = |tra: &str| sign_tra(tra, &cert, &key).expect("sign");
    let hour = chrono::Duration::hours(1);
    let minute = chrono::Duration::minutes(1);
    let cases = [
        ("not base64!".to_owned(), "cms.bad.base64"),
        (STANDARD.encode(b"not a CMS"), "cms.bad"),
        (
            signed(&login_ticket_request(SERVICE, now - hour)),
            "xml.expirationTime.expired",
        ),
        (
            signed(&login_ticket_request(SERVICE, now + hour)),
            "xml.generationTime.invalid",
        ),
        (
            signed(&tra_between(
                now - minute,
                now + chrono::Duration::hours(25),
            )),
            "xml.expirationTime.invalid",
        ),
        (signed(&login_ticket_request("wsfex", now)), "wsn.notFound"),
        (signed("<notATra/>"), "xml.bad"),
    ];
    for (cms, code) in cases {
        assert_eq!(login_code(&sim, &cms).await, code);
    }
    // The TRA changed after signing: the signature no longer holds.
    let tra = login_ticket_request(SERVICE, now);
    let mut der = STANDARD.decode(signed(&tra)).expect("der");
    let at = der
        .windows(6)
        .position(|w| w == b">wsfe<")
        .expect("the TRA is attached");
    der[at + 4] = b'x';
    assert_eq!(
        login_code(&sim, &STANDARD.encode(&der)).await,
        "cms.sign.invalid"
    );
    // A good login, then a second while its ticket is valid.
    assert_eq!(login_code(&sim, &signed(&tra)).await, "ok");
    assert_eq!(
        login_code(&sim, &signed(&login_ticket_request(SERVICE, now))).await,
        "coe.alreadyAuthenticated"
    );
    assert_eq!(logins(&sim), 1);
    sim.stop().await;
}
