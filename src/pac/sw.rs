//! SW Sapién (SW smarter web): REST, multipart in, JSON out. Also the client of the sandbox PAC,
//! which speaks the same wire shape.
//!
//! Stamping uses "Timbrado V4" (`POST /v4/cfdi33/stamp/v4`) with the stamp key in the `customid`
//! header. SW answers a repeat with HTTP 400 in both cases, so the message code is read before
//! the status: `307` (same content; `data` holds the original) and `CFDI3307` (same `customid`,
//! other content; `data.uuid` only, the XML is fetched by UUID).

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use reqwest::multipart::{Form, Part};
use serde_json::Value;
use tokio::sync::Mutex;

use super::sat::{SAT_STATUS_PRODUCTION, SatStatusClient, StatusOutcome, StatusQuery};
use super::{
    CancelOutcome, CancelRequest, Failure, PacConfig, PacError, PacKind, Recovery, Stamp,
    StampOutcome, Transport, base_url, http_client, http_status, message_code, refused_status,
    retry_after, transport_error,
};
use crate::domain::StampKey;

enum Auth {
    /// A long-lived token from the configuration.
    Static(String),
    /// User and password; the token is fetched on demand and renewed before it expires or
    /// when SW answers 401.
    Login {
        user: String,
        password: String,
        token: Mutex<Option<Token>>,
    },
}

struct Token {
    value: String,
    renew_at: Instant,
}

/// The SW adapter.
pub struct SwClient {
    http: reqwest::Client,
    services: String,
    api: String,
    auth: Auth,
    sat: SatStatusClient,
}

/// A raw HTTP answer.
struct Answer {
    status: StatusCode,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

enum Call {
    Answer(Answer),
    Failed(Transport),
}

impl Call {
    /// The answer, or the outcome of an operation that got none: refused is retryable, lost is
    /// unknown.
    fn answer_or<T: Failure>(self) -> Result<Answer, T> {
        match self {
            Call::Answer(a) => Ok(a),
            Call::Failed(Transport::Refused {
                reason,
                http_status,
            }) => Err(T::refused(reason, None, http_status)),
            Call::Failed(Transport::Lost(reason)) => Err(T::lost(reason, None)),
        }
    }
}

fn trim_slash(s: &str) -> String {
    s.trim_end_matches('/').to_owned()
}

/// SW's "api" host from its "services" host (`services.test.sw.com.mx` → `api.test.sw.com.mx`);
/// any other host (the sandbox) serves both.
fn api_host(services: &str) -> String {
    services.replacen("://services.", "://api.", 1)
}

impl SwClient {
    pub fn new(cfg: &PacConfig) -> Result<SwClient, PacError> {
        let services = base_url(cfg, "sw")?;
        let api = cfg
            .api_url
            .as_deref()
            .map(trim_slash)
            .unwrap_or_else(|| api_host(&services));
        let auth = match (&cfg.token, &cfg.user, &cfg.password) {
            (Some(t), _, _) if !t.is_empty() => Auth::Static(t.clone()),
            (_, Some(u), Some(p)) => Auth::Login {
                user: u.clone(),
                password: p.clone(),
                token: Mutex::new(None),
            },
            _ if cfg.kind == PacKind::Sandbox => Auth::Login {
                user: "sandbox".into(),
                password: "sandbox".into(),
                token: Mutex::new(None),
            },
            _ => {
                return Err(PacError::Config(
                    "SW needs `token`, or `user` and `password`".into(),
                ));
            }
        };
        let sat_url = match (&cfg.sat_status_url, cfg.kind) {
            (Some(u), _) => u.clone(),
            (None, PacKind::Sandbox) => format!("{services}/ConsultaCFDIService.svc"),
            (None, _) => SAT_STATUS_PRODUCTION.to_owned(),
        };
        let http = http_client(cfg)?;
        Ok(SwClient {
            sat: SatStatusClient::new(http.clone(), sat_url),
            http,
            services,
            api,
            auth,
        })
    }

    /// The bearer token, logging in when there is none or it is about to expire.
    async fn token(&self, force_renew: bool) -> Result<String, Call> {
        let (user, password, slot) = match &self.auth {
            Auth::Static(t) => return Ok(t.clone()),
            Auth::Login {
                user,
                password,
                token,
            } => (user, password, token),
        };
        let mut slot = slot.lock().await;
        if !force_renew
            && let Some(t) = slot.as_ref()
            && Instant::now() < t.renew_at
        {
            return Ok(t.value.clone());
        }
        let res = self
            .http
            .post(format!("{}/security/authenticate", self.services))
            .header("user", user)
            .header("password", password)
            .send()
            .await;
        let answer = match read(res).await {
            Call::Answer(a) => a,
            failed => return Err(failed),
        };
        let json: Value = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
        let token = json["data"]["token"].as_str().filter(|t| !t.is_empty());
        let Some(token) = token else {
            return Err(Call::Answer(answer));
        };
        // `expires_in` is a Unix time (python-satcfdi compares it with time.time()); renew a
        // minute early. Without it, assume SW's documented 2 hours.
        let now = chrono::Utc::now().timestamp();
        let left = json["data"]["expires_in"]
            .as_i64()
            .map_or(7200, |at| at - now);
        let left = Duration::from_secs(u64::try_from(left - 60).unwrap_or(0));
        *slot = Some(Token {
            value: token.to_owned(),
            renew_at: Instant::now() + left,
        });
        Ok(token.to_owned())
    }

    /// Sends an authenticated request built by `build`, renewing the token once on 401.
    /// `method url` with the token and no body: the answer, or the outcome of a call that got
    /// none.
    async fn authed<T: Failure>(&self, method: reqwest::Method, url: &str) -> Result<Answer, T> {
        self.call(|token| self.http.request(method.clone(), url).bearer_auth(token))
            .await
            .answer_or()
    }

    async fn call(&self, build: impl Fn(&str) -> reqwest::RequestBuilder) -> Call {
        let mut renewed = false;
        loop {
            let token = match self.token(renewed).await {
                Ok(t) => t,
                Err(Call::Answer(a)) => return Call::Failed(auth_failure(&a)),
                // A lost login stamped nothing.
                Err(Call::Failed(Transport::Refused { reason: r, .. } | Transport::Lost(r))) => {
                    return Call::Failed(Transport::Refused {
                        reason: format!("authentication: {r}"),
                        http_status: None,
                    });
                }
            };
            let answer = read(build(&token).send().await).await;
            match answer {
                Call::Answer(a)
                    if a.status == StatusCode::UNAUTHORIZED
                        && !renewed
                        && matches!(self.auth, Auth::Login { .. }) =>
                {
                    renewed = true;
                }
                Call::Answer(a) if a.status == StatusCode::UNAUTHORIZED => {
                    return Call::Failed(auth_failure(&a));
                }
                other => return other,
            }
        }
    }

    async fn send_stamp(&self, xml: &[u8], key: &StampKey) -> Call {
        let url = format!("{}/v4/cfdi33/stamp/v4", self.services);
        self.call(|token| {
            let part = Part::bytes(xml.to_vec()).file_name("xml");
            let part = part
                .mime_str("text/xml")
                .unwrap_or_else(|_| Part::bytes(xml.to_vec()));
            self.http
                .post(&url)
                .bearer_auth(token)
                .header("customid", key.as_str())
                .multipart(Form::new().part("xml", part))
        })
        .await
    }

    /// Stamps the sealed bytes under `key` (the `customid`).
    pub async fn stamp(&self, xml: &[u8], key: &StampKey) -> StampOutcome {
        let answer = match self.send_stamp(xml, key).await.answer_or() {
            Ok(a) => a,
            Err(out) => return out,
        };
        self.classify_stamp(xml, answer).await
    }

    async fn classify_stamp(&self, xml: &[u8], a: Answer) -> StampOutcome {
        let status = http_status(a.status);
        if refused_status(a.status) {
            let reason = format!(
                "HTTP {}: {}",
                a.status,
                String::from_utf8_lossy(&a.body).trim()
            );
            return StampOutcome::refused(reason, retry_after(&a.headers), status);
        }
        let Ok(json) = serde_json::from_slice::<Value>(&a.body) else {
            let reason = format!("HTTP {} with an unreadable body", a.status);
            return StampOutcome::unknown(reason, status);
        };
        let message = json["message"].as_str().unwrap_or_default().to_owned();
        let data = &json["data"];
        if json["status"] == "success" {
            return match self.stamp_from_data(data).await {
                Ok(stamp) => StampOutcome::Stamped(stamp),
                Err((reason, status)) => {
                    StampOutcome::unknown(format!("stamped, but {reason}"), status)
                }
            };
        }
        // The code before the status: SW answers duplicates with HTTP 400 like rejections.
        let code = message_code(&message);
        if code == "307" || code == "CFDI3307" {
            return match self.stamp_from_data(data).await {
                Ok(stamp) => {
                    let same_content = code == "307" && stamp.belongs_to(xml);
                    StampOutcome::AlreadyStamped {
                        stamp,
                        same_content,
                    }
                }
                Err((reason, status)) => {
                    StampOutcome::unknown(format!("{message}; but {reason}"), status)
                }
            };
        }
        if a.status.is_server_error() || a.status.is_success() {
            return StampOutcome::unknown(format!("HTTP {}: {message}", a.status), status);
        }
        if a.status == StatusCode::NOT_FOUND || a.status == StatusCode::UNAUTHORIZED {
            // A wrong path or credentials: nothing was stamped; the configuration must change.
            return StampOutcome::retryable(format!("HTTP {}: {message}", a.status), status);
        }
        if message.is_empty() {
            let reason = format!("HTTP {} without a message", a.status);
            return StampOutcome::unknown(reason, status);
        }
        // Answered with HTTP 400, but logged without a status, as always (see `rejected`).
        StampOutcome::rejected(code, message)
    }

    /// The stamp in a `data` object: `cfdi` when present, else fetched by `uuid`. An error
    /// carries the HTTP status of the fetch, when one came.
    async fn stamp_from_data(&self, data: &Value) -> Result<Stamp, (String, Option<u16>)> {
        if let Some(cfdi) = data["cfdi"].as_str().filter(|c| !c.is_empty()) {
            return Stamp::from_xml(cfdi.as_bytes().to_vec()).map_err(|e| (e, None));
        }
        let uuid = data["uuid"]
            .as_str()
            .filter(|u| !u.is_empty())
            .ok_or(("the answer has neither cfdi nor uuid".to_owned(), None))?;
        match self.recover_by_uuid(uuid).await {
            Recovery::Found(s) => Ok(s),
            Recovery::NotFound => {
                Err((format!("UUID {uuid} is not in the datawarehouse yet"), None))
            }
            Recovery::Unresolved {
                reason,
                http_status,
            } => Err((
                format!("fetching UUID {uuid} failed: {reason}"),
                http_status,
            )),
        }
    }

    /// SW offers no lookup by `customid` (docs/pac-apis.md §2.6: only by UUID); the documented
    /// way back is to resend the same bytes with the same `customid`, answered with `307` and
    /// the original. Bytes SW never stamped get stamped now (one CFDI either way); after a
    /// `CFDI3307` the stamp found is of other content (`Stamp::belongs_to` tells).
    pub async fn recover_by_key(&self, xml: &[u8], key: &StampKey) -> Recovery {
        match self.stamp(xml, key).await {
            StampOutcome::Stamped(s) => Recovery::Found(s),
            StampOutcome::AlreadyStamped { stamp, .. } => Recovery::Found(stamp),
            // SW (and the sandbox) answer a known customid or known content with `307` before
            // validating, so a refusal of these very bytes under this key means it holds no
            // stamp of them: a definite answer, not an open question.
            StampOutcome::Rejected { .. } => Recovery::NotFound,
            StampOutcome::Retryable {
                reason,
                http_status,
                ..
            }
            | StampOutcome::Unknown {
                reason,
                http_status,
            } => Recovery::Unresolved {
                reason,
                http_status,
            },
        }
    }

    /// `GET {api}/datawarehouse/v1/live/{uuid}`.
    pub async fn recover_by_uuid(&self, uuid: &str) -> Recovery {
        let url = format!("{}/datawarehouse/v1/live/{uuid}", self.api);
        let a = match self.authed(reqwest::Method::GET, &url).await {
            Ok(a) => a,
            Err(out) => return out,
        };
        if a.status == StatusCode::NOT_FOUND {
            return Recovery::NotFound;
        }
        let json: Value = serde_json::from_slice(&a.body).unwrap_or(Value::Null);
        if !a.status.is_success() || json["status"] != "success" {
            let message = json["message"].as_str().unwrap_or_default();
            let reason = format!("HTTP {}: {message}", a.status);
            return Recovery::unresolved(reason, http_status(a.status));
        }
        // The datawarehouse answer's exact shape is not published; take the XML from `data.cfdi`
        // or from the first record's `cfdi`.
        let data = &json["data"];
        let cfdi = data["cfdi"]
            .as_str()
            .or_else(|| data["records"][0]["cfdi"].as_str());
        match cfdi.filter(|c| !c.is_empty()) {
            Some(c) => match Stamp::from_xml(c.as_bytes().to_vec()) {
                Ok(s) => Recovery::Found(s),
                Err(e) => Recovery::unresolved(e, None),
            },
            None => Recovery::NotFound,
        }
    }

    /// `POST /cfdi33/cancel/{rfc}/{uuid}/{motivo}[/{folioSustitucion}]` (CSD kept at SW).
    pub async fn cancel(&self, req: &CancelRequest) -> CancelOutcome {
        let mut url = format!(
            "{}/cfdi33/cancel/{}/{}/{}",
            self.services,
            req.rfc_emisor,
            req.uuid,
            req.motivo.code()
        );
        if let Some(f) = &req.folio_sustitucion {
            url.push('/');
            url.push_str(f);
        }
        let a = match self.authed(reqwest::Method::POST, &url).await {
            Ok(a) => a,
            Err(out) => return out,
        };
        let status = http_status(a.status);
        if refused_status(a.status) {
            let reason = format!("HTTP {}", a.status);
            return CancelOutcome::refused(reason, retry_after(&a.headers), status);
        }
        let Ok(json) = serde_json::from_slice::<Value>(&a.body) else {
            let reason = format!("HTTP {} with an unreadable body", a.status);
            return CancelOutcome::unknown(reason, status);
        };
        let message = json["message"].as_str().unwrap_or_default().to_owned();
        if json["status"] != "success" {
            if a.status.is_server_error() || message.is_empty() {
                return CancelOutcome::unknown(format!("HTTP {}: {message}", a.status), status);
            }
            return CancelOutcome::rejected(message_code(&message), message);
        }
        let data = &json["data"];
        let acuse = data["acuse"].as_str().unwrap_or_default().to_owned();
        // `data.uuid` maps each UUID to its EstatusUUID.
        let code = data["uuid"]
            .as_object()
            .and_then(|m| {
                m.iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(&req.uuid))
                    .map(|(_, v)| v)
            })
            .and_then(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .or_else(|| v.as_i64().map(|n| n.to_string()))
            })
            .unwrap_or_default();
        match code.as_str() {
            "201" | "202" => CancelOutcome::Requested {
                code,
                acuse,
                estatus_cancelacion: None,
            },
            "" => CancelOutcome::unknown("the answer names no EstatusUUID", None),
            _ => {
                let message = cancel_code_text(&code).to_owned();
                CancelOutcome::rejected(code, message)
            }
        }
    }

    pub async fn sat_status(&self, q: &StatusQuery) -> StatusOutcome {
        self.sat.query(q).await
    }
}

/// The SAT's meaning of a per-UUID cancellation code.
pub fn cancel_code_text(code: &str) -> &'static str {
    match code {
        "201" => "Petición de cancelación realizada exitosamente",
        "202" => "Petición de cancelación realizada Previamente",
        "203" => "No corresponde el RFC del Emisor y de quien solicita la cancelación",
        "205" => "UUID No encontrado",
        "no_cancelable" => "El UUID contiene CFDI relacionados",
        _ => "",
    }
}

/// A refused login or a 401 after renewing: nothing was done, the credentials must change.
fn auth_failure(a: &Answer) -> Transport {
    let json: Value = serde_json::from_slice(&a.body).unwrap_or(Value::Null);
    let reason = format!(
        "authentication failed (HTTP {}): {}",
        a.status,
        json["message"]
            .as_str()
            .unwrap_or(&String::from_utf8_lossy(&a.body))
    );
    Transport::Refused {
        reason,
        http_status: http_status(a.status),
    }
}

async fn read(res: Result<reqwest::Response, reqwest::Error>) -> Call {
    let res = match res {
        Ok(r) => r,
        Err(e) => return Call::Failed(transport_error(&e)),
    };
    let status = res.status();
    let headers = res.headers().clone();
    match res.bytes().await {
        Ok(body) => Call::Answer(Answer {
            status,
            headers,
            body: body.to_vec(),
        }),
        // Headers arrived, so the request was received: whatever it did is unknown.
        Err(e) => Call::Failed(Transport::Lost(format!("the answer was cut off: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_host_follows_the_services_host() {
        assert_eq!(
            api_host("https://services.test.sw.com.mx"),
            "https://api.test.sw.com.mx"
        );
        assert_eq!(
            api_host("https://services.sw.com.mx"),
            "https://api.sw.com.mx"
        );
        assert_eq!(api_host("http://127.0.0.1:9000"), "http://127.0.0.1:9000");
    }
}
