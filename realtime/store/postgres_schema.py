"""The PostgreSQL store's tables, their versioned migrations, and its statements.

Every table is prefixed `realtime_`, so the store can share a database with
others. `realtime_schema` holds the one version number; `migrate` brings a
database from any older version to `SCHEMA_VERSION`, one migration at a time, in
one transaction under an advisory lock (replicas that start together migrate
once), and refuses a database a newer release has written.

A migration is appended, never edited: version N is `MIGRATIONS[N - 1]`.
"""

from __future__ import annotations

#: Key of the advisory lock the migrations hold (any constant; "rtstore" in ASCII).
MIGRATION_LOCK = 0x7274_7374_6F72_65

MIGRATIONS: tuple[str, ...] = (
    # 1: records in the order of their sequence; the bytes they hold, kept exactly by
    #    every put (its row lock orders the puts of every replica); the owner secret.
    """
    CREATE TABLE realtime_responses (
        seq BIGSERIAL PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        owner TEXT,
        previous_response_id TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        size BIGINT NOT NULL,
        data BYTEA NOT NULL
    );
    CREATE INDEX realtime_responses_created_at ON realtime_responses (created_at);
    CREATE TABLE realtime_usage (one BOOLEAN PRIMARY KEY CHECK (one), bytes BIGINT NOT NULL);
    INSERT INTO realtime_usage VALUES (TRUE, 0);
    CREATE TABLE realtime_meta (key TEXT PRIMARY KEY, value BYTEA NOT NULL);
    """,
    # 2: conversations: a header row each, in the responses' sequence (a write takes the
    #    next number), and a row per item (deleted with their conversation).
    """
    CREATE TABLE realtime_conversations (
        id TEXT PRIMARY KEY,
        seq BIGINT NOT NULL UNIQUE DEFAULT nextval('realtime_responses_seq_seq'),
        owner TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        size BIGINT NOT NULL,
        items BIGINT NOT NULL,
        metadata BYTEA NOT NULL
    );
    CREATE INDEX realtime_conversations_updated_at ON realtime_conversations (updated_at);
    CREATE TABLE realtime_conversation_items (
        seq BIGSERIAL PRIMARY KEY,
        conversation_id TEXT NOT NULL
            REFERENCES realtime_conversations (id) ON DELETE CASCADE,
        id TEXT NOT NULL,
        size BIGINT NOT NULL,
        data BYTEA NOT NULL,
        UNIQUE (conversation_id, id)
    );
    CREATE INDEX realtime_conversation_items_order
        ON realtime_conversation_items (conversation_id, seq);
    """,
    # 3: background responses not yet finished, by the runner (server) that runs them;
    #    a row goes with its response (deleted, expired or put again).
    """
    CREATE TABLE realtime_background (
        id TEXT PRIMARY KEY REFERENCES realtime_responses (id) ON DELETE CASCADE,
        runner TEXT NOT NULL
    );
    CREATE INDEX realtime_background_runner ON realtime_background (runner);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)

CREATE_VERSION_TABLE = "CREATE TABLE IF NOT EXISTS realtime_schema (version INTEGER NOT NULL)"
READ_VERSION = "SELECT max(version) FROM realtime_schema"

_COLUMNS = "id, owner, previous_response_id, created_at, size, data"

GET = (
    f"SELECT {_COLUMNS} FROM realtime_responses"
    " WHERE id = $1 AND owner IS NOT DISTINCT FROM $2 AND created_at >= $3"
)

#: One response and its predecessors, newest first, in one statement ($4: the depth
#: to stop at, limit + 1, so a truncated chain is seen).
CHAIN = f"""
WITH RECURSIVE chain AS (
    SELECT {_COLUMNS}, 0 AS depth FROM realtime_responses
    WHERE id = $1 AND owner IS NOT DISTINCT FROM $2 AND created_at >= $3
    UNION ALL
    SELECT r.id, r.owner, r.previous_response_id, r.created_at, r.size, r.data,
           chain.depth + 1
    FROM realtime_responses r JOIN chain ON r.id = chain.previous_response_id
    WHERE r.owner IS NOT DISTINCT FROM $2 AND r.created_at >= $3 AND chain.depth + 1 < $4
)
SELECT {_COLUMNS} FROM chain ORDER BY depth
"""

#: Taken first by every write: orders the writes of every replica, and keeps `bytes`.
LOCK_USAGE = "SELECT bytes FROM realtime_usage FOR UPDATE"
SET_USAGE = "UPDATE realtime_usage SET bytes = $1"
REPLACE = "DELETE FROM realtime_responses WHERE id = $1 RETURNING size"
INSERT = (
    f"INSERT INTO realtime_responses ({_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6) RETURNING seq"
)
DELETE = (
    "DELETE FROM realtime_responses"
    " WHERE id = $1 AND owner IS NOT DISTINCT FROM $2 AND created_at >= $3 RETURNING size"
)
EXPIRE = "DELETE FROM realtime_responses WHERE created_at < $1 RETURNING size"
EXPIRE_CONVERSATIONS = "DELETE FROM realtime_conversations WHERE updated_at < $1 RETURNING size"
#: The oldest records (responses and conversations) but the newest, a page at a time, to
#: find what the byte limit drops.
OLDEST = """
SELECT seq, size FROM (
    SELECT seq, size FROM realtime_responses
    UNION ALL SELECT seq, size FROM realtime_conversations
) AS records WHERE seq <> $1 AND seq > $2 ORDER BY seq LIMIT 256
"""
DROP_UP_TO = "DELETE FROM realtime_responses WHERE seq <= $1 AND seq <> $2 RETURNING size"
DROP_CONVERSATIONS_UP_TO = (
    "DELETE FROM realtime_conversations WHERE seq <= $1 AND seq <> $2 RETURNING size"
)

# --- conversations ---

_CONVERSATION_COLUMNS = "id, owner, created_at, updated_at, size, items, metadata"
CREATE_CONVERSATION = (
    f"INSERT INTO realtime_conversations ({_CONVERSATION_COLUMNS})"
    " VALUES ($1, $2, $3, $4, $5, 0, $6)"
)
GET_CONVERSATION = (
    f"SELECT {_CONVERSATION_COLUMNS} FROM realtime_conversations"
    " WHERE id = $1 AND owner IS NOT DISTINCT FROM $2 AND updated_at >= $3"
)
#: A write: the next sequence number, the age counted again, the size and count moved.
TOUCH_CONVERSATION = f"""
UPDATE realtime_conversations
SET seq = nextval('realtime_responses_seq_seq'), updated_at = $2,
    size = size + $3, items = items + $4, metadata = COALESCE($5, metadata)
WHERE id = $1
RETURNING seq, {_CONVERSATION_COLUMNS}
"""
DELETE_CONVERSATION = (
    "DELETE FROM realtime_conversations"
    " WHERE id = $1 AND owner IS NOT DISTINCT FROM $2 AND updated_at >= $3 RETURNING size"
)
EXISTING_ITEMS = (
    "SELECT id FROM realtime_conversation_items WHERE conversation_id = $1 AND id = ANY($2)"
)
INSERT_ITEM = (
    "INSERT INTO realtime_conversation_items (conversation_id, id, size, data)"
    " VALUES ($1, $2, $3, $4)"
)
ALL_ITEMS = (
    "SELECT size, data FROM realtime_conversation_items WHERE conversation_id = $1 ORDER BY seq"
)
ITEM_SEQ = "SELECT seq FROM realtime_conversation_items WHERE conversation_id = $1 AND id = $2"
ITEMS_AFTER = (
    "SELECT size, data FROM realtime_conversation_items WHERE conversation_id = $1"
    " AND seq > $2 ORDER BY seq LIMIT $3"
)
ITEMS_BEFORE = (
    "SELECT size, data FROM realtime_conversation_items WHERE conversation_id = $1"
    " AND seq < $2 ORDER BY seq DESC LIMIT $3"
)
GET_ITEM = "SELECT data FROM realtime_conversation_items WHERE conversation_id = $1 AND id = $2"
DELETE_ITEM = (
    "DELETE FROM realtime_conversation_items WHERE conversation_id = $1 AND id = $2 RETURNING size"
)

ADD_RUNNER = "INSERT INTO realtime_background (id, runner) VALUES ($1, $2)"
UNFINISHED = (
    "SELECT r.id, r.owner, r.previous_response_id, r.created_at, r.size, r.data"
    " FROM realtime_background b JOIN realtime_responses r ON r.id = b.id"
    " WHERE b.runner = $1 AND r.created_at >= $2 ORDER BY r.seq"
)

SECRET = "SELECT value FROM realtime_meta WHERE key = 'owner_secret'"
ADD_SECRET = (
    "INSERT INTO realtime_meta (key, value) VALUES ('owner_secret', $1) ON CONFLICT DO NOTHING"
)
