//! Media uploads on the working state: loaded, written and deleted with their expiry timers
//! (see `crate::media`).

use crate::rows::Timer;
use crate::state::State;
use crate::store::{Snapshot, StoreError, Table};
use crate::uploads::UploadRow;
use wire::UploadId;

impl State {
    /// Loads the media rows of `snapshot` into the state (called by `State::load`): the
    /// registry shard's (`crate::handoff::REGISTRY_SHARD`), which serves media.
    pub(super) fn load_media(
        &mut self,
        snapshot: &Snapshot,
        place: crate::handoff::ShardPlace,
    ) -> Result<(), StoreError> {
        if place.me() != crate::handoff::REGISTRY_SHARD {
            return Ok(());
        }
        for (k, v) in snapshot.get(&Table::Media).into_iter().flatten() {
            let row: UploadRow = serde_json::from_slice(v).map_err(|e| {
                StoreError::Backend(format!("corrupt row {k:?} in table media: {e}"))
            })?;
            self.timers
                .insert((row.expires_at, Timer::Media(row.upload_id.clone())));
            self.media.index(row);
        }
        Ok(())
    }
}

impl State {
    pub(crate) fn put_upload(&mut self, row: UploadRow) {
        self.record(Table::Media, row.upload_id.as_str(), &row);
        if let Some(old) = self.media.uploads.get(&row.upload_id)
            && old.expires_at != row.expires_at
        {
            let old = (old.expires_at, Timer::Media(row.upload_id.clone()));
            self.timers.remove(&old);
        }
        self.timers
            .insert((row.expires_at, Timer::Media(row.upload_id.clone())));
        self.media.index(row);
    }

    pub(crate) fn delete_upload(&mut self, id: &UploadId) {
        let Some(row) = self.media.uploads.remove(id) else {
            return;
        };
        self.media.by_key.remove(&row.media_key);
        if let Some(set) = self.media.by_owner.get_mut(&row.owner) {
            set.remove(id);
            if set.is_empty() {
                self.media.by_owner.remove(&row.owner);
            }
        }
        self.timers
            .remove(&(row.expires_at, Timer::Media(id.clone())));
        self.record_delete(Table::Media, id.as_str());
        self.media.blob_garbage.push((id.clone(), None));
    }
}
