package testutil

import (
	"fmt"
	"time"
)

// ClosedSchedule returns a sync window schedule (UTC) whose next start is
// 11 to 12 hours after now and whose last start was 12 to 13 hours before:
// a window of up to 11 hours on it is closed for the whole of a test,
// whatever the time of day the test runs. A test whose window must not hold
// its jobs uses it instead of a fixed hour, which is open once a day.
func ClosedSchedule() string {
	return fmt.Sprintf("0 %d * * *", (time.Now().UTC().Hour()+12)%24)
}
