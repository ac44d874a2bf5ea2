//! `relay backup` and `relay restore`: the SQLite store of a data directory copied to a file
//! while a relay may be running on it, and back into a fresh directory
//! (`relay_core::store::backup` does the copying).

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use relay_core::store::backup::{self, BackupReport};
use relay_server::secrets;

use super::STORE_FILE;
use super::push_setup::VAPID_KEY_FILE;

/// `relay backup --data DIR --out FILE`.
pub(crate) fn backup(data: &Path, out: &Path) -> Result<ExitCode> {
    let store = data.join(STORE_FILE);
    let report =
        backup::backup(&store, out).with_context(|| format!("backing up {}", store.display()))?;
    println!(
        "backup: {} -> {} ({})",
        store.display(),
        out.display(),
        summary(&report)
    );
    println!(
        "not in it: the key files {} and {} (copy them once, they change only when rotated) \
         and the media parts in {}",
        data.join(secrets::JWT_KEY_FILE).display(),
        data.join(VAPID_KEY_FILE).display(),
        data.join(super::BLOB_DIR).display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `relay restore --from FILE --data DIR`.
pub(crate) fn restore(from: &Path, data: &Path) -> Result<ExitCode> {
    secrets::create_private_dir(data)
        .with_context(|| format!("preparing the data directory {}", data.display()))?;
    let store = data.join(STORE_FILE);
    let report =
        backup::restore(from, &store).with_context(|| format!("restoring {}", from.display()))?;
    println!(
        "restored: {} -> {} ({})",
        from.display(),
        store.display(),
        summary(&report)
    );
    println!(
        "next: copy the key files back into {} ({}, and {} if the relay sends Web Push) \
         before starting, or the relay makes new ones (everyone logs in again; browsers \
         subscribe again); then start: relay --data {}",
        data.display(),
        secrets::JWT_KEY_FILE,
        VAPID_KEY_FILE,
        data.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `N bytes, schema vS, rows: table n, …` (tables with rows only).
fn summary(report: &BackupReport) -> String {
    let rows: Vec<String> = report
        .rows
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(table, n)| format!("{table} {n}"))
        .collect();
    format!(
        "{} bytes, schema v{}, rows: {}",
        report.bytes,
        report.schema_version,
        if rows.is_empty() {
            "none".to_owned()
        } else {
            rows.join(", ")
        }
    )
}
