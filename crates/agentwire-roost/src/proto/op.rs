//! The ops of the roost wire, read once from a request's `op` into a typed [`Op`]: the daemon dispatches on
//! the type (an unknown op is refused once, here, with `bad_request`), and whose op it is (a controller's,
//! refused on a job's connection) is a property of the type, not a list of strings beside it. Pure.

use crate::proto::refusal::Refusal;

/// A request's operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `hello`: an agent's greeting, its capabilities.
    Hello,
    /// `report`: an agent's report of its job.
    Report,
    /// `ack`: an agent finished a reply.
    Ack,
    /// `dispatch`: a controller starts a job.
    Dispatch,
    /// `conversation`: the job that serves an agentwire conversation.
    Conversation,
    /// `reply`: a controller's reply to a job.
    Reply,
    /// `stop`, `rm`, `respawn`.
    Lifecycle(Lifecycle),
    /// `rows`: every job's row.
    Rows,
    /// `about`: what the daemon is.
    About,
    /// `subscribe`: row pushes on this connection.
    Subscribe,
    /// `events`: the feed from a cursor.
    Events,
    /// `pin`, `rename`, `reorder`.
    Arrange(Arrange),
    /// `peers`: the sessions a session may reach.
    Peers,
    /// `peer_register`: a foreground session joins the fleet.
    PeerRegister,
    /// `send`: a peer item to another session.
    Send,
    /// `spawn`: a session starts a child job.
    Spawn,
    /// `handback`: a child's result to its parent.
    Handback,
    /// `watch`: be told when another session is next idle.
    Watch,
    /// `task`: the shared task board.
    Task,
    /// `shutdown`: the daemon stops.
    Shutdown,
    /// `concierge`: a controller turns the concierge on or off, or asks its state.
    Concierge,
    /// `concierge-ask`: a controller asks the concierge.
    ConciergeAsk,
    /// The concierge's own ops on its connection.
    ConciergeOwn(ConciergeOwn),
    /// `concierge-order`: standing orders.
    ConciergeOrder,
    /// `schedules` and `schedule-*`.
    Schedule(ScheduleOp),
}

/// `stop`, `rm` or `respawn`: what becomes of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lifecycle {
    /// Its process is stopped; the row stays.
    Stop,
    /// Stopped and removed.
    Rm,
    /// Stopped and started again, with a new token.
    Respawn,
}

/// `pin`, `rename` or `reorder`: how a person arranges the rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arrange {
    /// `pin {id, pinned}`.
    Pin,
    /// `rename {id, name}`.
    Rename,
    /// `reorder {ids}`.
    Reorder,
}

/// The concierge's own ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConciergeOwn {
    /// `concierge-say`.
    Say,
    /// `concierge-suggest`.
    Suggest,
    /// `concierge-reply`.
    Reply,
    /// `concierge-policy`.
    Policy,
    /// `concierge-act`.
    Act,
}

/// `schedules` and `schedule-*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScheduleOp {
    /// `schedules`: the list.
    List,
    /// `schedule-add`.
    Add,
    /// `schedule-rm`.
    Rm,
    /// `schedule-pause`.
    Pause,
}

/// Every op, each once: the wire names are these ops' [`Op::as_str`].
pub const ALL: [Op; 36] = [
    Op::Hello,
    Op::Report,
    Op::Ack,
    Op::Dispatch,
    Op::Conversation,
    Op::Reply,
    Op::Lifecycle(Lifecycle::Stop),
    Op::Lifecycle(Lifecycle::Rm),
    Op::Lifecycle(Lifecycle::Respawn),
    Op::Rows,
    Op::About,
    Op::Subscribe,
    Op::Events,
    Op::Arrange(Arrange::Pin),
    Op::Arrange(Arrange::Rename),
    Op::Arrange(Arrange::Reorder),
    Op::Peers,
    Op::PeerRegister,
    Op::Send,
    Op::Spawn,
    Op::Handback,
    Op::Watch,
    Op::Task,
    Op::Shutdown,
    Op::Concierge,
    Op::ConciergeAsk,
    Op::ConciergeOwn(ConciergeOwn::Say),
    Op::ConciergeOwn(ConciergeOwn::Suggest),
    Op::ConciergeOwn(ConciergeOwn::Reply),
    Op::ConciergeOwn(ConciergeOwn::Policy),
    Op::ConciergeOwn(ConciergeOwn::Act),
    Op::ConciergeOrder,
    Op::Schedule(ScheduleOp::List),
    Op::Schedule(ScheduleOp::Add),
    Op::Schedule(ScheduleOp::Rm),
    Op::Schedule(ScheduleOp::Pause),
];

impl Op {
    /// The op named `op` on the wire; an unknown one is refused `bad_request`.
    pub fn parse(op: &str) -> Result<Op, Refusal> {
        ALL.iter()
            .find(|o| o.as_str() == op)
            .copied()
            .ok_or_else(|| Refusal::bad(format!("unknown op {op:?}")))
    }

    /// Its name on the wire.
    pub fn as_str(&self) -> &'static str {
        match self {
            Op::Hello => "hello",
            Op::Report => "report",
            Op::Ack => "ack",
            Op::Dispatch => "dispatch",
            Op::Conversation => "conversation",
            Op::Reply => "reply",
            Op::Lifecycle(l) => l.as_str(),
            Op::Rows => "rows",
            Op::About => "about",
            Op::Subscribe => "subscribe",
            Op::Events => "events",
            Op::Arrange(Arrange::Pin) => "pin",
            Op::Arrange(Arrange::Rename) => "rename",
            Op::Arrange(Arrange::Reorder) => "reorder",
            Op::Peers => "peers",
            Op::PeerRegister => "peer_register",
            Op::Send => "send",
            Op::Spawn => "spawn",
            Op::Handback => "handback",
            Op::Watch => "watch",
            Op::Task => "task",
            Op::Shutdown => "shutdown",
            Op::Concierge => "concierge",
            Op::ConciergeAsk => "concierge-ask",
            Op::ConciergeOwn(ConciergeOwn::Say) => "concierge-say",
            Op::ConciergeOwn(ConciergeOwn::Suggest) => "concierge-suggest",
            Op::ConciergeOwn(ConciergeOwn::Reply) => "concierge-reply",
            Op::ConciergeOwn(ConciergeOwn::Policy) => "concierge-policy",
            Op::ConciergeOwn(ConciergeOwn::Act) => "concierge-act",
            Op::ConciergeOrder => "concierge-order",
            Op::Schedule(ScheduleOp::List) => "schedules",
            Op::Schedule(ScheduleOp::Add) => "schedule-add",
            Op::Schedule(ScheduleOp::Rm) => "schedule-rm",
            Op::Schedule(ScheduleOp::Pause) => "schedule-pause",
        }
    }

    /// Whether it is a controller's op (the person's: a hub, `agentwire jobs`), refused on a job's
    /// connection. `task` is not: a controller's and a session's alike, each checked inside.
    pub fn is_controllers(&self) -> bool {
        matches!(
            self,
            Op::About
                | Op::Dispatch
                | Op::Conversation
                | Op::Reply
                | Op::Lifecycle(_)
                | Op::Rows
                | Op::Subscribe
                | Op::Events
                | Op::Arrange(_)
                | Op::Shutdown
                | Op::Concierge
                | Op::ConciergeAsk
                | Op::Schedule(_)
        )
    }
}

impl Lifecycle {
    /// Its name on the wire (and in the feed).
    pub fn as_str(&self) -> &'static str {
        match self {
            Lifecycle::Stop => "stop",
            Lifecycle::Rm => "rm",
            Lifecycle::Respawn => "respawn",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::wire::ErrorCode;

    #[test]
    fn every_op_reads_back_from_its_name_and_an_unknown_one_is_refused() {
        let mut names = std::collections::HashSet::new();
        for op in ALL {
            assert_eq!(Op::parse(op.as_str()), Ok(op));
            assert!(names.insert(op.as_str()), "{} twice", op.as_str());
        }
        assert_eq!(names.len(), 36);
        let refused = Op::parse("Stop").unwrap_err();
        assert_eq!(refused.code, ErrorCode::BadRequest);
        assert_eq!(refused.message, "unknown op \"Stop\"");
        assert!(Op::parse("").is_err());
    }

    #[test]
    fn the_controllers_ops_are_the_persons() {
        let controllers: Vec<&str> = ALL
            .iter()
            .filter(|o| o.is_controllers())
            .map(Op::as_str)
            .collect();
        assert_eq!(
            controllers,
            [
                "dispatch",
                "conversation",
                "reply",
                "stop",
                "rm",
                "respawn",
                "rows",
                "about",
                "subscribe",
                "events",
                "pin",
                "rename",
                "reorder",
                "shutdown",
                "concierge",
                "concierge-ask",
                "schedules",
                "schedule-add",
                "schedule-rm",
                "schedule-pause",
            ]
        );
        for session_op in ["hello", "report", "ack", "send", "spawn", "task", "peers"] {
            assert!(!Op::parse(session_op).unwrap().is_controllers());
        }
    }
}
