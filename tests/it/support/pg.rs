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
