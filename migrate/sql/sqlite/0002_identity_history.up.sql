CREATE TABLE IF NOT EXISTS election_history (
    namespace   TEXT     NOT NULL CHECK (length(CAST(namespace AS BLOB)) BETWEEN 1 AND 191),
    term        INTEGER  NOT NULL CHECK (term >= 1),
    leader_id   TEXT     NOT NULL,
    hostname    TEXT     NOT NULL DEFAULT '' CHECK (length(CAST(hostname AS BLOB)) <= 255),
    pid         INTEGER  NOT NULL DEFAULT 0,
    label       TEXT     NOT NULL DEFAULT '' CHECK (length(CAST(label AS BLOB)) <= 255),
    acquired_at DATETIME NOT NULL,
    ended_at    DATETIME,
    end_reason  TEXT     CHECK (end_reason IN ('resigned', 'unregistered', 'expired', 'vacated')),
    PRIMARY KEY (namespace, term),
    CHECK ((ended_at IS NULL) = (end_reason IS NULL))
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS election_history_ended ON election_history (namespace, ended_at);

ALTER TABLE election_candidates ADD COLUMN hostname TEXT NOT NULL DEFAULT '' CHECK (length(CAST(hostname AS BLOB)) <= 255);

ALTER TABLE election_candidates ADD COLUMN pid INTEGER NOT NULL DEFAULT 0;

ALTER TABLE election_candidates ADD COLUMN label TEXT NOT NULL DEFAULT '' CHECK (length(CAST(label AS BLOB)) <= 255);
