//! `--report DIR`: the HTML pages of a run or a sweep (see `sim::report`).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use sim::report::{self, SummaryRow, Timeline};

/// Creates the report directory.
pub(crate) fn create_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

/// Draws and writes one run's page as `seed-N.html` in `dir`.
pub(crate) fn write_seed_page(
    dir: &Path,
    seed: u64,
    timeline: &Timeline,
) -> anyhow::Result<PathBuf> {
    let page =
        report::seed_page(timeline).with_context(|| format!("drawing seed {seed}'s page"))?;
    let path = dir.join(report::seed_file(seed));
    std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Writes the summary page, `index.html`, in `dir`.
pub(crate) fn write_index(
    dir: &Path,
    title: &str,
    facts: &[(String, String)],
    rows: &[SummaryRow],
) -> anyhow::Result<PathBuf> {
    let path = dir.join(report::INDEX_FILE);
    std::fs::write(&path, report::summary_page(title, facts, rows))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Oracles that found violations, with how many each, in order of first appearance.
pub(crate) fn by_oracle<'a>(oracles: impl IntoIterator<Item = &'a str>) -> Vec<(String, usize)> {
    let mut out: Vec<(String, usize)> = Vec::new();
    for o in oracles {
        match out.iter_mut().find(|(name, _)| name == o) {
            Some((_, n)) => *n += 1,
            None => out.push((o.to_owned(), 1)),
        }
    }
    out
}
