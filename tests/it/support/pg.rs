//! Where the PostgreSQL half of a test finds its server. Without AUTOFACTURA_TEST_DATABASE_URL the
//! PostgreSQL half is skipped with a loud line, unless AUTOFACTURA_REQUIRE_POSTGRES is set (CI sets
//! it): then a missing server fails the test instead of letting it pass on SQLite alone.

/// The admin URL of the test server (a role that may create databases), or `None` after a SKIP
/// line naming `what` ran on SQLite only.
pub fn admin_url(what: &str) -> Option<String> {
    match std::env::var("AUTOFACTURA_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("AUTOFACTURA_REQUIRE_POSTGRES").is_some() => panic!(
            "AUTOFACTURA_REQUIRE_POSTGRES is set but AUTOFACTURA_TEST_DATABASE_URL is not: \
             scripts/test-env could not set up PostgreSQL (see its messages)"
        ),
        _ => {
            eprintln!(
                "\n*** SKIP PostgreSQL: AUTOFACTURA_TEST_DATABASE_URL is not set; {what} ran on SQLite only ***\n"
            );
            None
        }
    }
}

/// `postgres://…/{name}` on the server of `admin`, with the password the tests connect with.
pub fn url_of(admin: &str, name: &str) -> String {
    use std::str::FromStr;
    let opts = sqlx::postgres::PgConnectOptions::from_str(admin).expect("pg url");
    let password = std::env::var("AUTOFACTURA_TEST_PG_PASSWORD").unwrap_or_else(|_| {
        admin
            .split_once("://")
            .and_then(|(_, rest)| rest.split_once('@'))
            .and_then(|(userinfo, _)| userinfo.split_once(':'))
            .map(|(_, p)| p.to_owned())
            .unwrap_or_default()
    });
    format!(
        "postgres://{}:{password}@{}:{}/{name}",
        opts.get_username(),
        opts.get_host(),
        opts.get_port()
    )
}

/// A fresh database for one test, `name`, made as a copy of a database migrated once per
/// set of migrations: copying takes a fraction of a second where running every migration
/// took seconds, and most of a PostgreSQL test's time was that. The app still migrates when it
/// starts, so a template a killed run left half-built only costs the migrations it lacks.
pub async fn create_test_database(admin: &str, name: &str) {
    use sqlx::{Connection, Executor};
    static TEMPLATE: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    let template = TEMPLATE.get_or_init(|| migrated_template(admin)).await;
    let mut conn = sqlx::PgConnection::connect(admin)
        .await
        .expect("connect to the test PostgreSQL");
    // A copy fails while anything is connected to its template: a run that is building it
    // elsewhere holds the lock only until it is done, so waiting a moment is enough.
    for attempt in 1.. {
        let sql = format!("CREATE DATABASE {name} TEMPLATE {template}");
        match conn.execute(sqlx::AssertSqlSafe(sql)).await {
            Ok(_) => return,
            Err(e) if attempt < 50 && e.to_string().contains("being accessed by other users") => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => panic!("create test database {name} from {template}: {e}"),
        }
    }
}

/// The name of the migrated template database for this tree's PostgreSQL migrations (their
/// digest names it, so a changed migration gets a template of its own), built when missing
/// under an advisory lock that other test processes wait on.
async fn migrated_template(admin: &str) -> String {
    use sqlx::{Connection, Executor};
    let name = format!(
        "af_tmpl_{}",
        super::migrations_digest("migrations/postgres")
    );
    let mut conn = sqlx::PgConnection::connect(admin)
        .await
        .expect("connect to the test PostgreSQL");
    drop_left_behind(&mut conn).await;
    conn.execute("SELECT pg_advisory_lock(4242016)")
        .await
        .expect("template lock");
    let exists: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM pg_database WHERE datname = $1")
        .bind(&name)
        .fetch_one(&mut conn)
        .await
        .expect("look for the template");
    if exists == 0 {
        conn.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .expect("create the template database");
        let db = autofactura::store::connect(&autofactura::config::DatabaseSettings {
            url: autofactura::config::SecretString::new(url_of(admin, &name)),
            max_connections: 1,
        })
        .await
        .expect("connect to the template");
        db.migrate().await.expect("migrate the template");
        db.close().await;
        // A new set of migrations: the earlier templates are of no more use. One that another
        // run is copying from cannot be dropped now; it goes at a later new template.
        let old: Vec<String> = sqlx::query_scalar(
            "SELECT datname FROM pg_database WHERE datname LIKE 'af\\_tmpl\\_%' AND datname <> $1",
        )
        .bind(&name)
        .fetch_all(&mut conn)
        .await
        .unwrap_or_default();
        for old in old {
            let sql = format!("DROP DATABASE IF EXISTS {old}");
            let _ = conn.execute(sqlx::AssertSqlSafe(sql)).await;
        }
    }
    // The session's end releases the lock.
    conn.close().await.expect("close");
    name
}

/// Drops the test databases (`af_test_{pid}_…`) of test processes that are gone: a test drops
/// its database in the background, so the last ones of a run may outlive it.
async fn drop_left_behind(conn: &mut sqlx::PgConnection) {
    use sqlx::Executor;
    let names: Vec<String> =
        sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'af\\_test\\_%'")
            .fetch_all(&mut *conn)
            .await
            .unwrap_or_default();
    for name in names {
        let pid = name.split('_').nth(2).and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !std::path::Path::new(&format!("/proc/{p}")).exists()) {
            let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
            let _ = conn.execute(sqlx::AssertSqlSafe(sql)).await;
        }
    }
}
