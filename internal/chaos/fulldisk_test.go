package chaos

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFullDisk fills the disk under a gantry process on bbolt: its file size limit (RLIMIT_FSIZE,
// set from outside with prlimit, as a full filesystem does: writes that would grow the file fail) is
// lowered to the database's size. Writes that need more room must answer 503 {"error":"storage
// unavailable"} (never a 500) and change nothing; every read keeps working; the gateway ejects no
// host for it. Once there is room again writes succeed, and after a restart everything acknowledged
// is there and the file passes bbolt's check.
func TestFullDisk(t *testing.T) {
	if os.Getenv(envChildDataDir) != "" {
		t.Skip("child process")
	}
	if testing.Short() {
		t.Skip("starts a gantry process")
	}
	dataDir := filepath.Join(t.TempDir(), "data")
	c := startChild(t, dataDir)
	auth := userAuth(t, dataDir)
	ids, acked := createCrashCredentials(t, c.rest, auth, "full-disk", 4)
	dbPath := filepath.Join(dataDir, "secrets.db")
	info, err := os.Stat(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	pid := c.cmd.Process.Pid
	var saved unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_FSIZE, nil, &saved); err != nil {
		t.Fatalf("prlimit: %v", err)
	}
	// Only the soft limit moves: it may go back up to the hard one without privileges.
	full := unix.Rlimit{Cur: uint64(info.Size()), Max: saved.Max}
	if err := unix.Prlimit(pid, unix.RLIMIT_FSIZE, &full, nil); err != nil {
		t.Fatalf("prlimit: %v", err)
	}

	// Values large enough that the file must grow soon; keep writing until it cannot.
	big := strings.Repeat("z", 64<<10)
	refused := 0
	for i := 0; i < 200 && refused < 5; i++ {
		id := ids[i%len(ids)]
		value := fmt.Sprintf("%d-%s", i, big)
		r := request(t, c.rest, auth, "PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"v": value}})
		switch {
		case r.code == 200:
			acked[id] = append(acked[id], ack{int(r.json["revision"].(float64)), value})
		case r.code == 503 && r.json["error"] == "storage unavailable":
			refused++
		default:
			t.Fatalf("write on a full disk: %d %s, want 200 or 503 storage unavailable", r.code, r.body)
		}
	}
	if refused == 0 {
		t.Fatal("200 writes of 64 KiB fitted in the file: the disk never filled")
	}
	// Reads go on, many times over the outlier detection's threshold, with the latest acknowledged value.
	for range 20 {
		for _, id := range ids {
			r := request(t, c.rest, auth, "GET", "/v1/credentials/"+id, nil)
			if r.code != 200 {
				t.Fatalf("read on a full disk: %d %s", r.code, r.body)
			}
			latest := acked[id][len(acked[id])-1]
			pairs, _ := r.json["credential_pairs"].(map[string]any)
			if int(r.json["revision"].(float64)) != latest.revision || pairs["v"] != latest.value {
				t.Fatalf("read on a full disk: %s at revision %v, want the acknowledged %d", id, r.json["revision"], latest.revision)
			}
		}
	}
	if n := adminStat(t, c.admin, "cluster.secrets.outlier_detection.ejections_total"); n != "0" {
		t.Errorf("the gateway ejected the secrets host %s times for a full disk", n)
	}

	// Room again: writes succeed.
	if err := unix.Prlimit(pid, unix.RLIMIT_FSIZE, &saved, nil); err != nil {
		t.Fatal(err)
	}
	r := request(t, c.rest, auth, "PUT", "/v1/credentials/"+ids[0], map[string]any{"credential_pairs": map[string]any{"v": "after"}})
	if r.code != 200 {
		t.Fatalf("write after the disk has room again: %d %s", r.code, r.body)
	}
	acked[ids[0]] = append(acked[ids[0]], ack{int(r.json["revision"].(float64)), "after"})
	t.Logf("full disk: %d writes refused with 503, reads unaffected, writes back once there was room", refused)

	c.kill(t)
	checkBolt(t, dbPath)
	checkChains(t, dataDir, acked)
}

// adminStat reads one statistic from an admin port's /stats ("" when absent).
func adminStat(t *testing.T, admin, name string) string {
	t.Helper()
	resp, err := http.Get(admin + "/stats?filter=^" + strings.ReplaceAll(name, ".", `\.`) + "$")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	_, v, _ := strings.Cut(strings.TrimSpace(string(body)), ": ")
	return v
}
