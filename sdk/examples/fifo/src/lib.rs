use std::collections::VecDeque;
use vassal_sdk::*;

struct Fifo {
    queue: VecDeque<TaskId>,
}

impl Policy for Fifo {
    fn kind(&self) -> &str {
        "fifo"
    }
    // A task joined: queue it if it can run.
    fn on_attach(&mut self, _: &mut Ctx, t: TaskId, info: &AttachInfo) -> Result<(), String> {
        if info.state == TaskState::Runnable {
            self.queue.push_back(t);
        }
        Ok(())
    }
    fn on_detach(&mut self, _: &mut Ctx, t: TaskId, _: Detach) {
        self.queue.retain(|&q| q != t);
    }
    fn on_wake(&mut self, _: &mut Ctx, t: TaskId, _: Wake) {
        self.queue.push_back(t);
    }
    fn on_block(&mut self, _: &mut Ctx, t: TaskId, _: Block) {
        self.queue.retain(|&q| q != t);
    }
    // Preempted but still runnable (always before the next pick on that CPU): requeue.
    fn on_preempt(&mut self, _: &mut Ctx, t: TaskId, _: CpuId, _: Preempt) {
        self.queue.push_back(t);
    }
    // The one question: which task runs on `cpu` next? None = no opinion (the
    // dispatcher asks the scheduler below).
    fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision> {
        let i = self.queue.iter().position(|&t| ctx.allowed(t, cpu))?;
        self.queue.remove(i).map(Decision::run_until_block)
    }
}

// Parameters come from the scenario's `params` table (or `--param K=V`); the usage
// declaration goes through the hierarchy's conflict check when the module is loaded.
fn build(p: &Params, _ncpus: u16) -> Result<Setup, String> {
    Ok(Setup { policy: Box::new(Fifo { queue: VecDeque::new() }), usage: p.reserved_usage(0.5)? })
}

vassal_sdk::export_policy!(build);
