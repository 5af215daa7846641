package benchload

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of the CPU times of /proc/<pid>/stat: 100 on every Linux build
// that matters (sysconf(_SC_CLK_TCK) needs cgo). The 10 ms it implies is why runs last seconds.
const clockTicks = 100

// ProcessCPU is the user and system CPU time process pid has used so far, from /proc/<pid>/stat
// (utime and stime, fields 14 and 15). Threads are included; children are not.
func ProcessCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("CPU time of process %d: %w", pid, err)
	}
	return parseStat(string(data))
}

// parseStat reads utime+stime from a /proc/<pid>/stat line. The command name (field 2) is in
// parentheses and may hold spaces and parentheses itself, so fields are counted after the last ')'.
func parseStat(line string) (time.Duration, error) {
	end := strings.LastIndexByte(line, ')')
	if end < 0 {
		return 0, fmt.Errorf("unexpected /proc stat line %.80q", line)
	}
	// After ")": field 3 (state) is the first; utime is field 14, stime field 15.
	fields := strings.Fields(line[end+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("unexpected /proc stat line %.80q", line)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("unexpected /proc stat field %q", f)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}
