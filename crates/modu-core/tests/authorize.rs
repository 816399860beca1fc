//! The unit tests of `modu_core::authorize` (kept out of the crate's sources).

use modu_core::authorize::*;
#[allow(unused_imports)]
use modu_core::*;

#[test]
fn rbac_rules() {
    let rbac = RbacToolAuthorizer::new()
        .allow("analyst", ["search", "read"])
        .allow("admin", ["*"]);
    let user = |roles: &[&str]| UserContext::with_roles(roles.iter().copied());
    assert!(rbac.authorize(&user(&["analyst"]), "search").is_ok(), "allowed");
    assert!(rbac.authorize(&user(&["analyst"]), "delete").is_err(), "denied");
    assert!(rbac.authorize(&user(&["admin"]), "delete").is_ok(), "wildcard");
    assert!(rbac.authorize(&user(&["intern"]), "search").is_err(), "unknown role");
    assert!(
        rbac.authorize(&user(&["analyst", "admin"]), "anything").is_ok(),
        "any role may allow"
    );
    assert!(
        rbac.authorize(&user(&["analyst"]), "no_such_tool").is_err(),
        "unknown tool"
    );
    let denied = rbac.authorize(&user(&[]), "search").unwrap_err();
    assert_eq!(denied.kind, ToolErrorKind::Authorization, "no roles");
    assert!(
        AllowAllAuthorizer.authorize(&user(&[]), "x").is_ok(),
        "the default allows all"
    );
}
