// LOGICAL UNIT RESET through the initiator library against a real target
// (RFC 7143 §11.5.1, used by initiator-recovery.sh):
//   initiator_tmf_check HOST:PORT IQN LUN
// resets LUN and checks that the target reports the reset to the next
// command (UNIT ATTENTION, ASC 29h "power on, reset, or bus device reset").
// (tgt 1.0.85 answers "function complete" for a LUN it does not have, so
// there is no refusal to check against it.)
// Prints one line per step; exit 0 when all hold, 1 otherwise.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "rbio/initiator/error.hpp"
#include "rbio/initiator/scsi.hpp"
#include "rbio/initiator/session.hpp"

using namespace rbio::initiator;

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s HOST:PORT IQN LUN\n", argv[0]);
        return 2;
    }
    try {
        SessionOptions o;
        o.target_name = argv[2];
        auto s = Session::login(Portal::parse(argv[1]), o);
        const uint64_t lun = std::strtoull(argv[3], nullptr, 10);
        test_unit_ready(*s, lun);  // clears the UNIT ATTENTION of the login

        TmfResponse r = s->lun_reset(lun);
        std::printf("LOGICAL UNIT RESET of LUN %llu: %s\n", (unsigned long long)lun, to_string(r).c_str());
        if (r != TmfResponse::Complete) return 1;

        ScsiOutcome after = s->execute(make_test_unit_ready(lun));
        SenseInfo sense = decode_sense(after.sense);
        std::printf("TEST UNIT READY after the reset: %s\n", describe(after).c_str());
        if (after.status != kStatusCheckCondition || !sense.valid || sense.key != kSenseUnitAttention ||
            sense.asc != 0x29)
            return 1;

        s->logout();
        return 0;
    } catch (const std::exception& e) {
        std::printf("error: %s\n", e.what());
        return 1;
    }
}
