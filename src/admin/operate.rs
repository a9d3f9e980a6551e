//! Operating during an incident: pausing and resuming stamping at the PAC (audited; while
//! paused no worker claims anything for it), and the dashboard's chart of stamps and errors
//! per minute over the last 24 hours, drawn here as SVG (no script, nothing external).

use std::fmt::Write as _;

use actix_web::{HttpResponse, web};
use chrono::{DateTime, Duration, NaiveDateTime, Timelike, Utc};
use serde::Deserialize;

use super::Admin;
use super::common::*;
use super::format::When;
use crate::error::AdminError;
use crate::state::AppState;
use crate::store::Db;

/// The PAC's pause, as the dashboard shows it.
pub struct PauseView {
    pub pac: String,
    pub by: String,
    pub reason: String,
    pub since: When,
}

/// The pause of this appliance's PAC (or of `pac`, its backup), if any.
pub async fn pause_of(db: &Db, pac: &str) -> Result<Option<PauseView>, AdminError> {
    let now = Utc::now();
    Ok(db.pac_pause(pac).await?.map(|(by, reason, at)| PauseView {
        pac: pac.to_owned(),
        by,
        reason,
        since: When::of(at, now),
    }))
}

/// The backup PAC (`[pac.backup]`) as the dashboard shows it: its name and its pause.
pub struct BackupView {
    pub name: String,
    pub paused: Option<PauseView>,
}

pub async fn backup_of(db: &Db, admin: &Admin) -> Result<Option<BackupView>, AdminError> {
    let Some(name) = &admin.backup_name else {
        return Ok(None);
    };
    Ok(Some(BackupView {
        name: name.clone(),
        paused: pause_of(db, name).await?,
    }))
}

#[derive(Debug, Deserialize)]
pub struct PauseForm {
    #[serde(default)]
    pub csrf: String,
    #[serde(default)]
    pub reason: String,
    /// Which PAC: empty for the primary, or the backup's name.
    #[serde(default)]
    pub pac: String,
}

#[derive(Debug, Deserialize)]
pub struct ResumeForm {
    #[serde(default)]
    pub csrf: String,
    #[serde(default)]
    pub pac: String,
}

impl HasCsrf for ResumeForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// The PAC a form names: the primary (empty or its name) or the backup.
fn which<'a>(admin: &'a Admin, asked: &str) -> Result<&'a str, AdminError> {
    let asked = asked.trim();
    if asked.is_empty() || asked == admin.pac_name {
        return Ok(&admin.pac_name);
    }
    match &admin.backup_name {
        Some(b) if b == asked => Ok(b),
        _ => Err(AdminError::Invalid(format!(
            "no PAC named {asked:?}: this appliance stamps with {}{}",
            admin.pac_name,
            admin
                .backup_name
                .as_ref()
                .map_or(String::new(), |b| format!(" and {b}"))
        ))),
    }
}

impl HasCsrf for PauseForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

pub async fn pause(
    state: web::Data<AppState>,
    admin: web::Data<Admin>,
    Posted(session, form): Posted<PauseForm>,
) -> Result<HttpResponse, AdminError> {
    let reason = form.reason.trim();
    if reason.is_empty() || reason.chars().count() > 500 {
        return Err(AdminError::Invalid(
            "say why stamping is paused (up to 500 characters): it is shown on the dashboard and kept in the audit log".into(),
        ));
    }
    let pac = which(&admin, &form.pac)?;
    if !state.db.pause_pac(pac, &session.actor, reason).await? {
        return Err(AdminError::Refused(format!(
            "stamping at {pac} is already paused"
        )));
    }
    tracing::warn!(%pac, actor = %session.actor, %reason, "admin: stamping paused");
    Ok(see_other("/admin?notice=paused".into()))
}

pub async fn resume(
    state: web::Data<AppState>,
    admin: web::Data<Admin>,
    Posted(session, form): Posted<ResumeForm>,
) -> Result<HttpResponse, AdminError> {
    let pac = which(&admin, &form.pac)?;
    if !state.db.resume_pac(pac, &session.actor).await? {
        return Err(AdminError::Refused(format!(
            "stamping at {pac} is not paused"
        )));
    }
    tracing::warn!(%pac, actor = %session.actor, "admin: stamping resumed");
    Ok(see_other("/admin?notice=resumed".into()))
}

// ---------------------------------------------------------------------------------------------
// The chart

/// Minutes in the chart.
const MINUTES: usize = 24 * 60;
/// Height of each half (stamps above the line, errors below), in SVG units.
const HALF: i64 = 50;

/// The last 24 hours per minute, as the dashboard shows them.
pub struct Chart {
    /// The `<svg>` element, built here from counts (rendered with `|safe`).
    pub svg: String,
    pub stamps: i64,
    pub errors: i64,
    pub peak: i64,
}

/// Reads and draws the chart ending at `now`.
pub async fn chart(db: &Db, now: DateTime<Utc>) -> Result<Chart, AdminError> {
    let end = now
        .with_second(0)
        .and_then(|t| t.with_nanosecond(0))
        .unwrap_or(now);
    let start = end - Duration::minutes(MINUTES as i64 - 1);
    let rows = db.pac_minutes(start).await?;
    let mut stamps = vec![0i64; MINUTES];
    let mut errors = vec![0i64; MINUTES];
    for (minute, s, e) in rows {
        let Ok(t) = NaiveDateTime::parse_from_str(&format!("{minute}:00"), "%Y-%m-%dT%H:%M:%S")
        else {
            continue;
        };
        let i = (t.and_utc() - start).num_minutes();
        if let Ok(i) = usize::try_from(i)
            && i < MINUTES
        {
            stamps[i] += s;
            errors[i] += e;
        }
    }
    Ok(draw(&stamps, &errors))
}

/// One vertical line per minute with anything in it: stamps up from the middle (green),
/// errors down from it (red), both scaled to the busiest minute.
fn draw(stamps: &[i64], errors: &[i64]) -> Chart {
    let peak = stamps
        .iter()
        .chain(errors)
        .copied()
        .max()
        .unwrap_or(0)
        .max(1);
    let path = |counts: &[i64], sign: i64| {
        let mut d = String::new();
        for (x, n) in counts.iter().enumerate().filter(|(_, n)| **n > 0) {
            let h = (n * HALF / peak).max(1);
            let _ = write!(d, "M{x} {}v{}", HALF + i64::from(sign > 0), sign * h);
        }
        d
    };
    let (s, e) = (path(stamps, -1), path(errors, 1));
    let svg = format!(
        "<svg class=\"chart\" viewBox=\"0 0 {MINUTES} {h}\" preserveAspectRatio=\"none\" role=\"img\" \
         aria-label=\"Stamps (up) and errors (down) per minute over the last 24 hours\">\
         <title>Stamps (up, green) and errors (down, red) per minute, last 24 hours</title>\
         <line x1=\"0\" y1=\"{HALF}\" x2=\"{MINUTES}\" y2=\"{HALF}\" stroke=\"#c9ced6\" stroke-width=\"1\"/>\
         <path d=\"{s}\" stroke=\"#0f7b3f\" stroke-width=\"2\" fill=\"none\"/>\
         <path d=\"{e}\" stroke=\"#b42318\" stroke-width=\"2\" fill=\"none\"/></svg>",
        h = 2 * HALF + 1,
    );
    Chart {
        svg,
        stamps: stamps.iter().sum(),
        errors: errors.iter().sum(),
        peak: stamps.iter().chain(errors).copied().max().unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_draws_stamps_up_and_errors_down_scaled_to_the_peak() {
        let mut s = vec![0; MINUTES];
        let mut e = vec![0; MINUTES];
        s[0] = 4;
        s[MINUTES - 1] = 2;
        e[10] = 1;
        let c = draw(&s, &e);
        assert_eq!((c.stamps, c.errors, c.peak), (6, 1, 4));
        assert!(c.svg.contains("d=\"M0 50v-50M1439 50v-25\""), "{}", c.svg);
        assert!(c.svg.contains("d=\"M10 51v12\""), "{}", c.svg);
        let empty = draw(&vec![0; MINUTES], &vec![0; MINUTES]);
        assert_eq!(empty.peak, 0);
        assert!(empty.svg.contains("d=\"\""));
    }
}
