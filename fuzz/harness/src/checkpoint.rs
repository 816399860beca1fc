//! `checkpoint`: bytes → JSON → `Agent::import_state` → `pending_approvals`, decisions,
//! `resume`, for a standard and a strict Plan-and-Execute agent (every schema version: the
//! corpus holds real checkpoints of versions 1 and 2 of both, from `make-seeds`).

use std::sync::{Arc, OnceLock};

use modu_agent::Agent;
use modu_core::{CheckpointStore, InMemoryCheckpointStore};

use crate::agents::{Policy, agent, finishing_model};

struct Fixture {
    store: Arc<InMemoryCheckpointStore>,
    agents: Vec<Agent<()>>,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let store = Arc::new(InMemoryCheckpointStore::new());
        let agents = [Policy::Standard, Policy::Strict]
            .into_iter()
            .map(|p| agent(p, finishing_model(), Arc::clone(&store)))
            .collect();
        Fixture { store, agents }
    })
}

/// Properties: no panic; a state that imports exports again, and the export imports and exports
/// to the same JSON (a checkpoint survives moving between processes unchanged); a resumed run
/// ends, with an output when it has no error, and a paused one lists as many calls as its
/// error counts.
pub fn checkpoint(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let f = fixture();
    crate::block_on(async {
        for agent in &f.agents {
            let Ok(run_id) = agent.import_state(value.clone()).await else {
                continue;
            };
            let exported = agent.export_state(&run_id).await.expect("an imported state exports");
            let again = agent
                .import_state(exported.clone())
                .await
                .expect("an exported state imports");
            assert_eq!(again, run_id);
            assert_eq!(
                agent.export_state(&run_id).await.expect("exports twice"),
                exported,
                "export → import → export changed the state"
            );
            if let Ok(pending) = agent.pending_approvals(&run_id).await {
                for (i, request) in pending.iter().enumerate() {
                    let decided = if i % 2 == 0 {
                        agent.approve(&run_id, &request.call_id).await
                    } else {
                        agent.reject(&run_id, &request.call_id, Some("no".into())).await
                    };
                    decided.expect("a listed approval can be decided");
                }
            }
            let result = agent.resume(&run_id, ()).await;
            match &result {
                modu_core::RunOutcome::Completed(_) | modu_core::RunOutcome::Failed(_) => {}
                modu_core::RunOutcome::Paused(paused) => {
                    assert!(
                        !paused.approvals.is_empty() || !paused.inputs.is_empty(),
                        "a paused run lists its calls"
                    );
                }
            }
            let _ = f.store.delete(&run_id).await;
        }
    });
}
