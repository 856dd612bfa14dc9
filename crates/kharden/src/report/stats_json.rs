//! Stats as JSON.

use crate::defense::registry;
use crate::sim::{Counter, FlushReason, Stats, TimeCategory};
use serde::ser::{Serialize, SerializeMap, Serializer};

/// Serialised grouped like gem5's stats: `time.<category>` in ns, `counters.<name>`,
/// `tlb_flush.<reason>`; plug-ins' own counters by their registered names.
impl Serialize for Stats {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for &c in TimeCategory::ALL {
            m.serialize_entry(&format!("time_ns.{}", c.name()), &self.time(c).ns())?;
        }
        for &c in Counter::ALL {
            m.serialize_entry(&format!("counters.{}", c.name()), &self.counter(c))?;
        }
        for &r in FlushReason::ALL {
            m.serialize_entry(&format!("tlb_flush.{}", r.name()), &self.flushes(r))?;
        }
        for name in registry::counter_names() {
            m.serialize_entry(
                &format!("counters.{name}"),
                &self.owned(registry::counter(name)),
            )?;
        }
        m.end()
    }
}
