//! Durable [`ClientStore`] on SQLite (bundled): WAL journal, `synchronous = FULL`, versioned schema
//! (`PRAGMA user_version`). Each record is a JSON document beside the columns it is queried by;
//! every write is a single statement, hence atomic and durable when it returns.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension as _, params};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{
    ClientStore, OfflineMessage, OutboxIntent, PendingAction, ReceiptLevel, SessionRecord,
    StoreError, StoredIdentity, StoredMessage, apply_limit,
};
use crate::security::TrustRecord;

/// Schema version written by this code (migrations run from any older version).
pub const SCHEMA_VERSION: i64 = 4;

const SCHEMA_V1: &str = "
CREATE TABLE identity (id INTEGER PRIMARY KEY CHECK (id = 1), doc TEXT NOT NULL);
CREATE TABLE sessions (conversation_id TEXT PRIMARY KEY, their_alias_id TEXT NOT NULL, doc TEXT NOT NULL);
CREATE INDEX sessions_by_alias ON sessions (their_alias_id, conversation_id);
CREATE TABLE messages (id TEXT PRIMARY KEY, conversation_id TEXT NOT NULL, time INTEGER NOT NULL, doc TEXT NOT NULL);
CREATE INDEX messages_by_conv_time ON messages (conversation_id, time, id);
CREATE TABLE outbox (internal_id TEXT PRIMARY KEY, added_at INTEGER NOT NULL, doc TEXT NOT NULL);
CREATE TABLE offline_inbox (id TEXT PRIMARY KEY, created_at INTEGER NOT NULL, doc TEXT NOT NULL);
CREATE TABLE trust (contact_id TEXT PRIMARY KEY, doc TEXT NOT NULL);
";

const SCHEMA_V2: &str = "
CREATE TABLE receipt_levels (conversation_id TEXT PRIMARY KEY, doc TEXT NOT NULL);
";

const SCHEMA_V3: &str = "
CREATE TABLE pending_actions (ord INTEGER PRIMARY KEY, doc TEXT NOT NULL);
";

const SCHEMA_V4: &str = "
CREATE TABLE confirmed_orders (order_id TEXT PRIMARY KEY);
";

/// `MIGRATIONS[n]` takes the schema from version `n` to `n + 1`.
const MIGRATIONS: &[&str] = &[SCHEMA_V1, SCHEMA_V2, SCHEMA_V3, SCHEMA_V4];

/// SQLite-backed store.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
}

fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn doc<T: Serialize>(v: &T) -> Result<String, StoreError> {
    Ok(serde_json::to_string(v)?)
}

impl SqliteStore {
    /// Opens (creating or migrating) a database file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::init(Connection::open(path)?)
    }

    /// A private in-memory database (same code paths, no durability).
    pub fn open_in_memory() -> Result<Self, StoreError> {
        Self::init(Connection::open_in_memory()?)
    }

    fn init(conn: Connection) -> Result<Self, StoreError> {
        let _mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if !(0..=SCHEMA_VERSION).contains(&version) {
            return Err(StoreError::SchemaVersion(version));
        }
        for (from, sql) in (0_i64..).zip(MIGRATIONS).skip_while(|(v, _)| *v < version) {
            let to = from + 1;
            conn.execute_batch(&format!("BEGIN; {sql} PRAGMA user_version = {to}; COMMIT;"))?;
        }
        Ok(Self { conn })
    }

    fn one<T: DeserializeOwned>(
        &self,
        sql: &str,
        p: impl rusqlite::Params,
    ) -> Result<Option<T>, StoreError> {
        let d: Option<String> = self.conn.query_row(sql, p, |r| r.get(0)).optional()?;
        d.map(|d| serde_json::from_str(&d).map_err(StoreError::from))
            .transpose()
    }

    fn many<T: DeserializeOwned>(
        &self,
        sql: &str,
        p: impl rusqlite::Params,
    ) -> Result<Vec<T>, StoreError> {
        let mut st = self.conn.prepare_cached(sql)?;
        let docs = st
            .query_map(p, |r| r.get::<_, String>(0))?
            .collect::<Result<Vec<_>, _>>()?;
        docs.iter()
            .map(|d| serde_json::from_str(d).map_err(StoreError::from))
            .collect()
    }
}

impl ClientStore for SqliteStore {
    fn load_identity(&self) -> Result<Option<StoredIdentity>, StoreError> {
        self.one("SELECT doc FROM identity WHERE id = 1", [])
    }
    fn save_identity(&mut self, identity: &StoredIdentity) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT OR REPLACE INTO identity (id, doc) VALUES (1, ?1)",
            params![doc(identity)?],
        )?;
        Ok(())
    }
    fn clear_identity(&mut self) -> Result<(), StoreError> {
        self.conn.execute("DELETE FROM identity", [])?;
        Ok(())
    }
    fn load_session(&self, conversation_id: &str) -> Result<Option<SessionRecord>, StoreError> {
        self.one(
            "SELECT doc FROM sessions WHERE conversation_id = ?1",
            params![conversation_id],
        )
    }
    fn load_session_by_alias(&self, alias_id: &str) -> Result<Option<SessionRecord>, StoreError> {
        self.one(
            "SELECT doc FROM sessions WHERE their_alias_id = ?1 ORDER BY conversation_id LIMIT 1",
            params![alias_id],
        )
    }
    fn save_session(&mut self, session: &SessionRecord) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT OR REPLACE INTO sessions (conversation_id, their_alias_id, doc) VALUES (?1, ?2, ?3)",
            params![session.conversation_id, session.their_alias_id, doc(session)?],
        )?;
        Ok(())
    }
    fn delete_session(&mut self, conversation_id: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "DELETE FROM sessions WHERE conversation_id = ?1",
            params![conversation_id],
        )?;
        Ok(())
    }
    fn list_sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        self.many("SELECT doc FROM sessions ORDER BY conversation_id", [])
    }
    fn get_message(&self, id: &str) -> Result<Option<StoredMessage>, StoreError> {
        self.one("SELECT doc FROM messages WHERE id = ?1", params![id])
    }
    fn put_message(&mut self, message: &StoredMessage) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT OR REPLACE INTO messages (id, conversation_id, time, doc) VALUES (?1, ?2, ?3, ?4)",
            params![message.id, message.conversation_id, ms(message.time), doc(message)?],
        )?;
        Ok(())
    }
    fn get_history(
        &self,
        conversation_id: &str,
        limit: Option<usize>,
        before: Option<u64>,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let v = self.many(
            "SELECT doc FROM messages WHERE conversation_id = ?1 AND time < ?2 ORDER BY time, id",
            params![conversation_id, before.map_or(i64::MAX, ms)],
        )?;
        Ok(apply_limit(v, limit))
    }
    fn message_conversations(&self) -> Result<Vec<String>, StoreError> {
        let mut st = self.conn.prepare_cached(
            "SELECT DISTINCT conversation_id FROM messages ORDER BY conversation_id",
        )?;
        let v = st
            .query_map([], |r| r.get::<_, String>(0))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(v)
    }
    fn clear_history(&mut self, conversation_id: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "DELETE FROM messages WHERE conversation_id = ?1",
            params![conversation_id],
        )?;
        Ok(())
    }
    fn clear_all_history(&mut self) -> Result<(), StoreError> {
        self.conn.execute("DELETE FROM messages", [])?;
        Ok(())
    }
    fn put_outbox(&mut self, intent: &OutboxIntent) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT OR REPLACE INTO outbox (internal_id, added_at, doc) VALUES (?1, ?2, ?3)",
            params![intent.internal_id, ms(intent.added_at), doc(intent)?],
        )?;
        Ok(())
    }
    fn delete_outbox(&mut self, internal_id: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "DELETE FROM outbox WHERE internal_id = ?1",
            params![internal_id],
        )?;
        Ok(())
    }
    fn list_outbox(&self) -> Result<Vec<OutboxIntent>, StoreError> {
        self.many("SELECT doc FROM outbox ORDER BY added_at, internal_id", [])
    }
    fn put_offline(&mut self, message: &OfflineMessage) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT OR REPLACE INTO offline_inbox (id, created_at, doc) VALUES (?1, ?2, ?3)",
            params![message.id, ms(message.created_at), doc(message)?],
        )?;
        Ok(())
    }
    fn delete_offline(&mut self, id: &str) -> Result<(), StoreError> {
        self.conn
            .execute("DELETE FROM offline_inbox WHERE id = ?1", params![id])?;
        Ok(())
    }
    fn list_offline(&self) -> Result<Vec<OfflineMessage>, StoreError> {
        self.many("SELECT doc FROM offline_inbox ORDER BY created_at, id", [])
    }
    fn has_offline(&self, id: &str) -> Result<bool, StoreError> {
        let n: i64 = self.conn.query_row(
            "SELECT COUNT(*) FROM offline_inbox WHERE id = ?1",
            params![id],
            |r| r.get(0),
        )?;
        Ok(n > 0)
    }
    fn count_offline(&self, conversation_id: Option<&str>) -> Result<usize, StoreError> {
        let n: i64 = match conversation_id {
            Some(c) => self.conn.query_row(
                "SELECT COUNT(*) FROM offline_inbox WHERE json_extract(doc, '$.conversationId') = ?1",
                params![c],
                |r| r.get(0),
            )?,
            None => self
                .conn
                .query_row("SELECT COUNT(*) FROM offline_inbox", [], |r| r.get(0))?,
        };
        Ok(usize::try_from(n).unwrap_or(0))
    }
    fn put_trust(&mut self, record: &TrustRecord) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT OR REPLACE INTO trust (contact_id, doc) VALUES (?1, ?2)",
            params![record.contact_id, doc(record)?],
        )?;
        Ok(())
    }
    fn delete_trust(&mut self, contact_id: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "DELETE FROM trust WHERE contact_id = ?1",
            params![contact_id],
        )?;
        Ok(())
    }
    fn list_trust(&self) -> Result<Vec<TrustRecord>, StoreError> {
        self.many("SELECT doc FROM trust ORDER BY contact_id", [])
    }
    fn put_receipt_level(&mut self, level: &ReceiptLevel) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT OR REPLACE INTO receipt_levels (conversation_id, doc) VALUES (?1, ?2)",
            params![level.conversation_id, doc(level)?],
        )?;
        Ok(())
    }
    fn list_receipt_levels(&self) -> Result<Vec<ReceiptLevel>, StoreError> {
        self.many(
            "SELECT doc FROM receipt_levels ORDER BY conversation_id",
            [],
        )
    }
    fn put_pending_action(&mut self, action: &PendingAction) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT OR REPLACE INTO pending_actions (ord, doc) VALUES (?1, ?2)",
            params![ms(action.order), doc(action)?],
        )?;
        Ok(())
    }
    fn delete_pending_action(&mut self, order: u64) -> Result<(), StoreError> {
        self.conn.execute(
            "DELETE FROM pending_actions WHERE ord = ?1",
            params![ms(order)],
        )?;
        Ok(())
    }
    fn list_pending_actions(&self) -> Result<Vec<PendingAction>, StoreError> {
        self.many("SELECT doc FROM pending_actions ORDER BY ord", [])
    }
    fn put_confirmed_order(&mut self, order_id: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT OR IGNORE INTO confirmed_orders (order_id) VALUES (?1)",
            params![order_id],
        )?;
        Ok(())
    }
    fn has_confirmed_order(&self, order_id: &str) -> Result<bool, StoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT 1 FROM confirmed_orders WHERE order_id = ?1",
                params![order_id],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }
}
