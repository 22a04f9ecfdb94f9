// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

import {ZooERC20} from "./ZooERC20.sol";

/// The owner can freeze chosen holders (nobody is blacklisted in the zoo).
contract BlacklistToken is ZooERC20 {
    mapping(address => bool) public isBlacklisted;

    error Blacklisted(address account);

    constructor(string memory name_, string memory symbol_, uint256 supply) {
        _init(name_, symbol_, supply, msg.sender);
    }

    function blacklist(address account) external onlyOwner {
        isBlacklisted[account] = true;
    }

    function unBlacklist(address account) external onlyOwner {
        isBlacklisted[account] = false;
    }

    function _transfer(address from, address to, uint256 value) internal override {
        if (isBlacklisted[from]) revert Blacklisted(from);
        if (isBlacklisted[to]) revert Blacklisted(to);
        _move(from, to, value);
    }
}
