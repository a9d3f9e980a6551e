//! The sandbox's memory: an append-only journal of events, one JSON object a line, each line
//! handed to the kernel in one `write` before the answer leaves, so a stamp the sandbox answered
//! survives `kill -9` (the kernel holds the line once `write` returns). It does not `fsync`:
//! surviving a power cut is not a sandbox's job, and a flush per stamp under the journal's lock
//! would cap the sandbox at the disk's flush rate.
//! On start the journal is replayed; a torn last line (killed mid-write, never answered) is cut.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One stamp the sandbox issued.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StampRecord {
    pub uuid: String,
    pub customid: Option<String>,
    /// SHA-256 (hex) of the comprobante's cadena original: the content dedup key.
    pub cadena_sha256: String,
    pub stamped_at: DateTime<Utc>,
    pub fecha_timbrado: String,
    /// The stamped XML.
    pub xml: String,
    pub rfc_emisor: String,
    pub rfc_receptor: String,
    pub total: String,
    pub tipo: String,
    pub moneda: String,
    pub tipo_cambio: Option<String>,
    pub sello_tail: String,
    /// UUIDs this CFDI relates to (`cfdi:CfdiRelacionados`).
    pub related: Vec<String>,
}

/// Where a cancellation stands.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CancelStatus {
    /// Waiting for the receptor; `deadline` only on the first request (positiva ficta).
    Pending {
        deadline: Option<DateTime<Utc>>,
    },
    CancelledWithoutAcceptance,
    CancelledAccepted,
    /// The receptor let the deadline pass.
    CancelledExpired,
    Rejected,
}

impl CancelStatus {
    /// The status as of `now` (an unanswered first request lapses into `Plazo vencido`).
    pub fn at(self, now: DateTime<Utc>) -> CancelStatus {
        match self {
            Self::Pending { deadline: Some(d) } if now >= d => Self::CancelledExpired,
            s => s,
        }
    }

    pub fn is_cancelled(self) -> bool {
        matches!(
            self,
            Self::CancelledWithoutAcceptance | Self::CancelledAccepted | Self::CancelledExpired
        )
    }

    /// SAT's `EstatusCancelacion` string.
    pub fn estatus(self) -> &'static str {
        match self {
            Self::Pending { .. } => "En proceso",
            Self::CancelledWithoutAcceptance => "Cancelado sin aceptación",
            Self::CancelledAccepted => "Cancelado con aceptación",
            Self::CancelledExpired => "Plazo vencido",
            Self::Rejected => "Solicitud rechazada",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CancelRecord {
    pub uuid: String,
    pub motivo: String,
    pub folio_sustitucion: Option<String>,
    pub requested_at: DateTime<Utc>,
    pub status: CancelStatus,
    /// `EsCancelable` when the request was made.
    pub es_cancelable: String,
    pub acuse: String,
}

/// A journal line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    Stamp(StampRecord),
    Cancel(CancelRecord),
    /// The receptor answered a pending cancellation.
    CancelDecided {
        uuid: String,
        accepted: bool,
        at: DateTime<Utc>,
    },
    ClockAdvanced {
        seconds: i64,
    },
}

/// Everything the sandbox knows, rebuilt from the journal.
#[derive(Debug, Default)]
pub struct SimState {
    pub stamps: Vec<StampRecord>,
    pub by_cadena: HashMap<String, usize>,
    pub by_uuid: HashMap<String, usize>,
    /// A `customid`'s first use.
    pub by_customid: HashMap<String, usize>,
    pub cancels: HashMap<String, CancelRecord>,
    pub clock_offset: i64,
}

impl SimState {
    pub fn apply(&mut self, ev: &Event) {
        match ev {
            Event::Stamp(s) => {
                let i = self.stamps.len();
                self.by_cadena.entry(s.cadena_sha256.clone()).or_insert(i);
                self.by_uuid.insert(s.uuid.clone(), i);
                if let Some(c) = &s.customid {
                    // A key whose window passed is taken by its next use.
                    self.by_customid.insert(c.clone(), i);
                }
                self.stamps.push(s.clone());
            }
            Event::Cancel(c) => {
                self.cancels.insert(c.uuid.clone(), c.clone());
            }
            Event::CancelDecided { uuid, accepted, .. } => {
                if let Some(c) = self.cancels.get_mut(uuid) {
                    c.status = if *accepted {
                        CancelStatus::CancelledAccepted
                    } else {
                        CancelStatus::Rejected
                    };
                }
            }
            Event::ClockAdvanced { seconds } => self.clock_offset += seconds,
        }
    }

    pub fn stamp(&self, uuid: &str) -> Option<&StampRecord> {
        self.by_uuid
            .get(&uuid.to_uppercase())
            .map(|&i| &self.stamps[i])
    }
}

/// The append-only file.
#[derive(Debug)]
pub struct Journal {
    file: File,
}

impl Journal {
    /// Opens (or creates) the journal at `path` and replays it.
    pub fn open(path: &Path) -> io::Result<(Journal, SimState)> {
        let mut state = SimState::default();
        let journal = Journal::replay(path, |ev: Event| state.apply(&ev))?;
        Ok((journal, state))
    }

    /// Opens (or creates) a journal of `E` lines at `path`, handing every whole line to
    /// `apply` in order (the sandbox ARCA keeps its vouchers in one too).
    pub fn replay<E: serde::de::DeserializeOwned>(
        path: &Path,
        mut apply: impl FnMut(E),
    ) -> io::Result<Journal> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)?;
        let mut good_end = 0u64;
        let mut reader = BufReader::new(&file);
        let mut line = String::new();
        let mut lineno = 0;
        loop {
            line.clear();
            let n = reader.read_line(&mut line)?;
            if n == 0 {
                break;
            }
            lineno += 1;
            if !line.ends_with('\n') {
                break; // torn tail: the write never finished, so it was never answered
            }
            let ev = serde_json::from_str::<E>(line.trim_end()).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{} line {lineno}: {e}", path.display()),
                )
            })?;
            apply(ev);
            good_end += n as u64;
        }
        drop(reader);
        if file.metadata()?.len() > good_end {
            file.set_len(good_end)?;
            file.seek(SeekFrom::End(0))?;
        }
        Ok(Journal { file })
    }

    /// Appends `ev`: once this returns, the line is the kernel's and outlives the process.
    pub fn append(&mut self, ev: &impl Serialize) -> io::Result<()> {
        let mut line = serde_json::to_vec(ev).map_err(io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_last_line_is_cut_and_the_rest_replayed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        {
            let (mut j, _) = Journal::open(&path).unwrap();
            j.append(&Event::ClockAdvanced { seconds: 5 }).unwrap();
        }
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"event\":\"clock_adv").unwrap();
        drop(f);
        let (mut j, s) = Journal::open(&path).unwrap();
        assert_eq!(s.clock_offset, 5);
        j.append(&Event::ClockAdvanced { seconds: 1 }).unwrap();
        let (_, s) = Journal::open(&path).unwrap();
        assert_eq!(s.clock_offset, 6);
    }
}
