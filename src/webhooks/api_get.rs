//! One authenticated `GET` to a payment provider's API (Mercado Pago payments, the Stripe API),
//! shared by both clients. A leaf: it imports nothing of the crate, so the clients that
//! `state` holds never import the routes.

/// What a provider's API answered to a `GET`, when it answered at all.
pub(crate) enum Answer {
    Ok(Vec<u8>),
    /// Not a 2xx: the status and the start of the body (for the reason kept with the event).
    Refused(u16, String),
}

/// `GET url` with `token` as the bearer; `Err` (why) when the API could not be reached.
pub(crate) async fn get_with_bearer(
    http: &reqwest::Client,
    url: &str,
    token: &str,
) -> Result<Answer, String> {
    let resp = http
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status();
    let bytes = resp.bytes().await.map_err(|e| e.to_string())?;
    Ok(if status.is_success() {
        Answer::Ok(bytes.to_vec())
    } else {
        let body = String::from_utf8_lossy(&bytes).chars().take(300).collect();
        Answer::Refused(status.as_u16(), body)
    })
}
