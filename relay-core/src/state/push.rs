//! Push targets on the working state: loaded and written (see `crate::push`).

use crate::push_targets::{PushRow, PushTarget};
use crate::state::State;
use crate::store::{Snapshot, StoreError, Table};
use wire::UserUuid;

impl State {
    /// Loads the push rows of `place`'s users in `snapshot` into the state (called by
    /// `State::load`).
    pub(super) fn load_push(
        &mut self,
        snapshot: &Snapshot,
        place: crate::handoff::ShardPlace,
    ) -> Result<(), StoreError> {
        for (k, v) in snapshot.get(&Table::PushTargets).into_iter().flatten() {
            let row: PushRow = serde_json::from_slice(v).map_err(|e| {
                StoreError::Backend(format!("corrupt row {k:?} in table push_targets: {e}"))
            })?;
            if place.elsewhere(&row.user).is_some() {
                continue;
            }
            self.push.targets.insert(row.user, row.targets);
        }
        Ok(())
    }
}

impl State {
    pub(crate) fn put_push_targets(&mut self, user: &UserUuid, targets: Vec<PushTarget>) {
        if targets.is_empty() {
            if self.push.targets.remove(user).is_some() {
                self.record_delete(Table::PushTargets, user.as_str());
            }
            return;
        }
        let row = PushRow {
            user: user.clone(),
            targets,
        };
        self.record(Table::PushTargets, user.as_str(), &row);
        self.push.targets.insert(row.user, row.targets);
    }
}
