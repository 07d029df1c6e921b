"""The Runwick coordinator: owns every job's state, lease and history."""
